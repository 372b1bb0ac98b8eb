"""The job types that ship with fairgpu; each doubles as an example of writing one."""

from app.jobs.builtin.burn import burn

__all__ = ["burn"]
