"""Scan stage: run the signature catalogue over every log file and turn matches into Findings."""
