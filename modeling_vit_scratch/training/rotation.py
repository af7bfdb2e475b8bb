"""The Trainer's `--save_total_limit` rotation of checkpoints, never over a file the run did not write.

The claim of the output folder refuses a checkpoint that holds someone else's file before the run starts
(`common/folders.py` `check_removals`); a file put into a checkpoint while the run goes on is met here, at each save,
by the same test (`not_written_by_a_run`). Training glue, never imported by the model files.
"""

import logging
from pathlib import Path

from transformers import Trainer

from modeling_vit_scratch.common.folders import checkpoints, not_written_by_a_run

logger = logging.getLogger(__name__)


class GuardedRotation(Trainer):
    """The Trainer whose `--save_total_limit` rotation never removes a file the run did not write: while a
    checkpoint holds one (put there during the run; the claim refuses those found at the start), a save rotates
    nothing away, keeping every checkpoint, and a warning names the files."""

    def _save_checkpoint(self, model, trial):
        limit = self.args.save_total_limit
        foreign = [name for path in checkpoints(Path(self.args.output_dir)) for name in not_written_by_a_run(path)]
        if foreign and self.args.should_save:
            logger.warning(
                "Kept every checkpoint in %s (--save_total_limit %s would remove the oldest): files that vit-scratch "
                "did not write are in them (%s); move them out to let old checkpoints go.",
                self.args.output_dir,
                limit,
                ", ".join(foreign[:4]),
            )
            self.args.save_total_limit = None
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
