"""The app's four views: the network editor, data and training settings, the training view, the runs table."""
