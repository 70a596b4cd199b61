"""Shared storage test suite and the subprocess scripts it drives (not collected by pytest)."""
