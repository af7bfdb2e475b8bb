"""Push a saved model folder to the Hugging Face Hub: `vit-scratch push FOLDER REPO_ID [options]` (or
`python scripts/push_to_hub.py` with the same arguments).

Nothing is sent unless the folder's code is vit-scratch's own, it reloads to the same outputs from the staged repo in
a process that can reach no token, and no file holds a token; then one commit. The token comes from HF_TOKEN, `hf auth
login` or --token; it is never printed. Running the same command again finishes a push cut short, or changes nothing.
"""

import argparse

from ..errors import command
from ..secrets import shown
from .push import push_folder


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a training output, or any folder save_pretrained wrote")
    parser.add_argument("repo_id", help="e.g. your-name/vit-digits")
    parser.add_argument("--private", action="store_true", help="create the repo private")
    parser.add_argument("--revision", help="branch to push to (created if missing), or refs/pr/N; default main")
    parser.add_argument("--create_pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--commit_message", help="message of the commit")
    parser.add_argument("--max_shard_size", default="2GB", help="split the weights above this size")
    parser.add_argument("--token", help="a Hub token (default: HF_TOKEN or the saved login)")
    parser.add_argument(
        "--overwrite_card", action="store_true", help="replace a README.md on the repo that vit-scratch did not write"
    )
    parser.add_argument(
        "--allow_unmeasured_weights",
        action="store_true",
        help="push weights changed after training, with a card that reports no metrics for them",
    )
    return parser


@command
def main(argv: list[str]) -> None:
    args = vars(parser().parse_args(argv))
    result = push_folder(args.pop("folder"), args.pop("repo_id"), **args)
    print(f"repo: {shown(result.url)}\ncommit: {result.commit}")
    if result.pull_request:
        print(f"pull request: {shown(result.pull_request)}")
    for note in result.notes:
        print(note)


if __name__ == "__main__":
    main()
