"""The one reload check (modeling_vit_scratch/sharing/reload_check.py), in this process and with the folder's own code."""

import pytest
import torch
from helpers import one_by_default, tiny_config
from safetensors.torch import load_file, save_file

from modeling_vit_scratch import ViTScratchForImageClassification
from modeling_vit_scratch.sharing.reload_check import FolderReloadError, check_reloads_to, reloaded_logits


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = ViTScratchForImageClassification(tiny_config()).eval()
    model.save_pretrained(tmp_path)
    return model, tmp_path, torch.randn(3, 3, 20, 20)


def nudge_one_weight(folder):
    """The weights on disk stop being the model's: one value of one tensor changes."""
    weights = load_file(folder / "model.safetensors")
    weights["classifier.bias"][0] += 0.5
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})


# with its own code (a new process): in the slow tier, since the thread-count test below and every push in
# tests/sharing/test_hub.py run that same check bit for bit in a new process
@pytest.mark.parametrize("own_code", one_by_default([False, True]))
@pytest.mark.integration
def test_a_saved_folder_reloads_bit_for_bit(saved, own_code):
    model, folder, pixel_values = saved
    check_reloads_to(model, folder, pixel_values, own_code=own_code)
    with torch.no_grad():
        assert torch.equal(reloaded_logits(folder, pixel_values, own_code=own_code), model(pixel_values).logits)


# the comparison is the same function whichever process computed the logits: own_code=False tries it by default
@pytest.mark.parametrize("own_code", one_by_default([False, True]))
@pytest.mark.integration
def test_other_weights_on_disk_are_caught_with_the_difference(saved, own_code):
    model, folder, pixel_values = saved
    nudge_one_weight(folder)
    with pytest.raises(FolderReloadError, match=r"does not reload to the model that wrote it .* difference 5\.00e-01"):
        check_reloads_to(model, folder, pixel_values, own_code=own_code)
    check_reloads_to(model, folder, pixel_values, own_code=own_code, tolerance=0.6)  # within what was allowed


@pytest.mark.integration
def test_a_folder_that_does_not_load_with_its_own_code_is_named(saved):
    model, folder, pixel_values = saved
    (folder / "modeling_vit_scratch.py").write_text("raise ImportError('broken copy')\n")
    with pytest.raises(
        FolderReloadError, match=f"^{folder.resolve()} does not load .* with its own code .*broken copy"
    ):
        check_reloads_to(model, folder, pixel_values, own_code=True)


def test_the_model_keeps_its_mode(saved):
    model, folder, pixel_values = saved
    model.train()
    check_reloads_to(model, folder, pixel_values)
    assert model.training


@pytest.mark.integration
def test_the_check_in_a_new_process_computes_with_the_callers_thread_count(tmp_path, monkeypatch):
    """Bit for bit needs the same summation order: a caller on one thread (as here) whose environment would give
    the new process two (OMP_NUM_THREADS) still passes; with the child's own default the logits differ in the
    last bits for a model whose products the threads split."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert torch.get_num_threads() == 1  # tests/conftest.py
    torch.manual_seed(0)
    config = tiny_config(image_size=64, patch_size=8, hidden_size=96, intermediate_size=301)
    model = ViTScratchForImageClassification(config).eval()
    model.save_pretrained(tmp_path)
    check_reloads_to(model, tmp_path, torch.randn(8, 3, 64, 64), own_code=True)
