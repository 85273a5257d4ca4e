"""The dashboard's modal screens, one per module."""
