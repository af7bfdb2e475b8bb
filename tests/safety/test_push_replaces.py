"""A push removes, in its own commit, the repo's files that would change what `from_pretrained` loads: a PEFT
adapter (transformers would load the adapter's base model instead of the pushed one), weights of other formats, and
says so in one line; the user's other files are kept."""

from modeling_vit_scratch.sharing.push import files_notes, replaced_files


def test_files_a_loader_follows_are_removed_and_said(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"new")
    (tmp_path / "config.json").write_text("{}")
    remote = dict.fromkeys(
        [
            "adapter_config.json",
            "adapter_model.safetensors",
            "adapter_model.bin",
            "processor_config.json",
            "model.gguf",
            "pytorch_model.bin",
            "notes.md",
            "config.json",
        ]
    )
    removed = replaced_files(remote, tmp_path)
    assert removed == sorted(set(remote) - {"notes.md", "config.json"})
    notes = files_notes("me/model", remote, tmp_path, keep_card=False)
    followed = (
        "Removed from me/model in the model commit (its history keeps them): adapter_config.json, adapter_model.bin, "
        "adapter_model.safetensors, model.gguf, processor_config.json, which would make from_pretrained load another "
        "model (an adapter's base, another processor) instead of the pushed one."
    )
    weights = (
        "Removed from me/model in the model commit (its history keeps them): pytorch_model.bin, an earlier model's "
        "weights or results, which would be read instead of, or beside, the new ones."
    )
    assert notes == [followed, weights, "Kept on me/model, not written by vit-scratch: notes.md."]
