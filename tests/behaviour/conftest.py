"""The runs several behaviour tests read, each made once per test run (`made_once`: one worker makes it, the others
wait and read it; nobody changes it, a test that needs to change one copies it first): a trained folder, its
explanation, its conversion to transformers and back, its push to a local Hub. Every run has SECRET in HF_TOKEN;
its exit status and output are kept beside it (`save_run`)."""

import json
from pathlib import Path
from types import SimpleNamespace

import hub_server
import pytest
from helpers import made_once, tiny_model_file, write_imagefolder
from hub_server import LocalHub
from pinned import SECRET, TRAINED_REPO, contents, in_process, run, save_run, saved_run, train_args

HERE = Path(__file__).resolve().parent


SHARED_RUNS = {"trained", "explained", "converted", "pushed"}


def pytest_collection_modifyitems(items):
    """This folder's tests in its own places (the others' order kept), so that with several workers none waits long
    for a shared run another is making: first the tests that read none, then those that read the trained folder
    only, then one test of each later run (their makers run side by side), then the others, last the one that reads
    them all."""
    here = [index for index, item in enumerate(items) if item.path.is_relative_to(HERE)]
    seen: dict[frozenset, int] = {}

    def order(item) -> tuple[int, int]:
        shared = frozenset(SHARED_RUNS & set(item.fixturenames))
        seen[shared] = seen.get(shared, -1) + 1  # how many tests before this one read the same runs
        if not shared or shared == {"trained"}:
            return (len(shared), 0)
        return (2, seen[shared] if len(shared) == 2 else len(items))  # the reader of every run last

    for index, item in zip(here, sorted((items[index] for index in here), key=order)):
        items[index] = item


@pytest.fixture
def cli(capfd):
    """`cli(COMMAND, *ARGS)`: `vit-scratch COMMAND ARGS` in this process (`in_process`)."""
    return lambda command, *args: in_process(capfd, command, *args)


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """scripts/train.py on an image folder of 3 classes (cat, dog, fox) into root/model."""

    def make(root):
        write_imagefolder(root / "images", per_class=10)
        tiny_model_file(root)
        save_run(run("train", *train_args(root, root / "model"), home=root / "home"), root / "train.json")

    root = made_once(tmp_path_factory, "behaviour-trained", make)
    return SimpleNamespace(root=root, model=root / "model", images=root / "images", ran=saved_run(root / "train.json"))


@pytest.fixture(scope="session")
def explained(trained, tmp_path_factory):
    """scripts/explain.py on the trained folder and one of its images, into a new root/out."""

    def make(root):
        before = contents(trained.model)
        image = trained.images / "dog" / "0.png"
        ran = run("explain", "--model", trained.model, "--image", image, "--out", root / "out", home=root / "home")
        save_run(ran, root / "explain.json")
        (root / "model_contents.json").write_text(json.dumps(dict(before=before, after=contents(trained.model))))

    root = made_once(tmp_path_factory, "behaviour-explained", make)
    model_contents = json.loads((root / "model_contents.json").read_text())
    return SimpleNamespace(root=root, out=root / "out", ran=saved_run(root / "explain.json"), model=model_contents)


@pytest.fixture(scope="session")
def converted(trained, tmp_path_factory):
    """scripts/convert_checkpoint.py: the trained folder to transformers (root/hf), and that back (root/back)."""

    def make(root):
        home = root / "home"
        there = run("convert", "--to", "transformers", "--input", trained.model, "--output", root / "hf", home=home)
        save_run(there, root / "to.json")
        back = run("convert", "--from", "transformers", "--input", root / "hf", "--output", root / "back", home=home)
        save_run(back, root / "from.json")

    root = made_once(tmp_path_factory, "behaviour-converted", make)
    return SimpleNamespace(
        root=root,
        hf=root / "hf",
        back=root / "back",
        to=saved_run(root / "to.json"),
        back_ran=saved_run(root / "from.json"),
    )


@pytest.fixture(scope="session")
def pushed(trained, tmp_path_factory):
    """scripts/push_to_hub.py of the trained folder to TRAINED_REPO on a local Hub (root/hub) that takes SECRET as
    the user's token."""

    def make(root):
        before = contents(trained.model)
        token, hub_server.TOKEN = hub_server.TOKEN, SECRET  # the token the local Hub's whoami accepts
        try:
            with LocalHub(root / "hub") as hub:
                ran = run("push", trained.model, TRAINED_REPO, home=root / "home", env=hub.env(root / "home"))
        finally:
            hub_server.TOKEN = token
        save_run(ran, root / "push.json")
        (root / "model_contents.json").write_text(json.dumps(dict(before=before, after=contents(trained.model))))

    root = made_once(tmp_path_factory, "behaviour-pushed", make)
    model_contents = json.loads((root / "model_contents.json").read_text())
    hub = LocalHub(root / "hub")  # read from its store: no server, no request
    return SimpleNamespace(root=root, hub=hub, ran=saved_run(root / "push.json"), model=model_contents)
