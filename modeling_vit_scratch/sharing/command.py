"""Push a saved model folder to the Hugging Face Hub: `vit-scratch push FOLDER REPO_ID [options]`
(or `python scripts/push_to_hub.py` with the same arguments).

Nothing is pushed unless the folder's code is vit-scratch's own, it reloads identically through the Auto classes
with that code, its weights are the ones its metrics were measured on (or --allow_unmeasured_weights) and no file
holds a token. Every Hub argument (repo id, revision, shard size, commit message, token) is checked before the
folder is loaded. The token comes from HF_TOKEN or `hf auth login`; it is never printed. An earlier model's weights
and results on the repo are removed in the push's commit; other files, and a README.md that vit-scratch did not write,
are kept (each said in a line). A push that fails half-way, or is stopped by Ctrl-C, is finished by running the same command again (Ctrl-C's line says
whether the model commit was made).
"""

import argparse
import sys

from modeling_vit_scratch.common.commands import entry_point, when_interrupted
from modeling_vit_scratch.common.secrets import RedactingArgumentParser, error_line
from modeling_vit_scratch.common.user_paths import user_path
from modeling_vit_scratch.sharing.push import HUB_ERRORS, push_to_hub

# what Ctrl-C or SIGTERM prints once the push has reached each stage (`push_to_hub`'s `reached`)
STOPPED_AT = {
    "preparing": "Interrupted before the model commit: nothing was committed to {repo} (the repo may exist, as it "
    "was or empty); run the same command again to push.",
    "sending": "Interrupted while the model was being sent to {repo}: its files upload first, then one commit, all "
    "or nothing, so the model commit was made only if it is on the repo now; run the same command again: it commits "
    "the model unless the repo holds it already.",
    "committed": "Interrupted after the model commit {commit} to {repo}: the model is there, complete and loadable, "
    "its card not yet pinned to that commit; run the same command again to pin it (the model is not committed "
    "again).",
}


@entry_point()
def main(argv: list[str]) -> None:
    parser = RedactingArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "folder", type=user_path, help="a training output, or any folder written by save_pretrained with its processor"
    )
    parser.add_argument("repo_id", help="e.g. your-name/vit-digits")
    parser.add_argument("--private", action="store_true", help="create the repo private")
    parser.add_argument("--revision", help="branch to push to (created if missing), or refs/pr/N; default main")
    parser.add_argument("--create_pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--commit_message", help="message of the model commit")
    parser.add_argument("--max_shard_size", default="2GB", help="split model.safetensors above this size")
    parser.add_argument(
        "--overwrite_card",
        action="store_true",
        help="replace a README.md on the repo that vit-scratch did not write (or that was edited) with the generated card",
    )
    parser.add_argument(
        "--allow_unmeasured_weights",
        action="store_true",
        help="push weights changed after training, with a card that reports no metrics for them",
    )
    dashed = [arg for arg in argv if arg.startswith("-") and not arg.startswith("--") and "/" in arg]
    if dashed:  # argparse would read it as an option and say the repo id is missing
        sys.exit(
            error_line(
                f"The repo id {dashed[0]!r} starts with '-', which no Hub repo id may: give one like "
                "your-name/vit-digits."
            )
        )
    args = parser.parse_args(argv)
    when_interrupted(  # push_to_hub says where it is as it goes (`reached`)
        "Interrupted before anything changed on the Hub: nothing was pushed; run the same command again to push."
    )
    try:
        result = push_to_hub(
            args.folder,
            args.repo_id,
            private=args.private,
            revision=args.revision,
            create_pr=args.create_pr,
            commit_message=args.commit_message,
            max_shard_size=args.max_shard_size,
            allow_unmeasured_weights=args.allow_unmeasured_weights,
            overwrite_card=args.overwrite_card,
            reached=lambda stage, commit=None: when_interrupted(
                STOPPED_AT[stage].format(repo=args.repo_id, commit=commit)
            ),
        )
    except (ValueError, RuntimeError, *HUB_ERRORS) as error:  # FileNotFoundError and the Hub's errors are OSErrors
        sys.exit(error_line(error))
    print(f"repo: {result.repo_url}\ncommit: {result.commit_id}")
    for note in result.notes:
        print(note)
    if result.pull_request_url:
        print(f"pull request: {result.pull_request_url}")
