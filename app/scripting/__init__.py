"""Script jobs: a user's own project, run in its own environment inside a sandbox."""
