"""Code that accounts upload to run as script jobs: its archive's rules (archive.py) and where it
is kept (store.py). docs/scripts.md says what is accepted and how long it is kept."""
