"""Modal screens: the help screen of keys, and the path prompt for saving and opening configs."""
