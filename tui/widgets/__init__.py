"""Custom widgets of the app: per-layer timing bars and the decision-boundary plot."""
