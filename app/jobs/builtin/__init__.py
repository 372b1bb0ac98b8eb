"""The job types that ship with fairgpu; each doubles as an example of writing one."""

from app.jobs.builtin.burn import burn
from app.jobs.builtin.ddp import ddp_burn
from app.jobs.builtin.digits import DigitsTrain
from app.jobs.builtin.script import Script
from app.jobs.builtin.vad import Vad

__all__ = ["DigitsTrain", "Script", "Vad", "burn", "ddp_burn"]
