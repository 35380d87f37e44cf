"""Imports every command module so each registers itself on the `cli` group."""

from . import data_cmds, eval_cmds, retrieve_cmds, pipeline_cmds, budget_cmds, tk_cmds  # noqa: F401
from . import score_cmds  # noqa: F401
from . import fuse_cmds  # noqa: F401
from . import report_cmds  # noqa: F401
from . import answer_cmds  # noqa: F401
from . import suggest_cmds  # noqa: F401
