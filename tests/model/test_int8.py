"""int8 CPU inference as for transformers' own models: `from_pretrained(folder, quantization_config=TorchAoConfig(...))`
with torchao's dynamic int8 activations and int8 weights (the `int8` extra)."""

import pytest
import torch
from helpers import tiny_config
from torch import nn
from transformers import AutoModelForImageClassification, TorchAoConfig

from modeling_vit_scratch import ViTScratchForImageClassification

pytestmark = pytest.mark.int8  # run in .venv-timm, where make test installs the int8 extra


def int8_config() -> TorchAoConfig:
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig  # only where the tier runs: .venv-timm

    return TorchAoConfig(Int8DynamicActivationInt8WeightConfig())


@pytest.mark.parametrize("loader", [ViTScratchForImageClassification, AutoModelForImageClassification])
def test_int8_loads_through_quantization_config_and_gives_float32s_logits(tmp_path, loader):
    """Every linear layer (patch projection, attention, MLP, head) holds int8 weights; the logits stay within 2% of
    the largest float32 logit and predict the same classes."""
    torch.manual_seed(0)
    model = ViTScratchForImageClassification(tiny_config(patch_embedding="linear")).eval()
    with torch.no_grad():  # logits of a trained model's scale, so that the classes differ clearly
        model.classifier.weight.mul_(50)
    model.save_pretrained(tmp_path)
    int8 = loader.from_pretrained(tmp_path, quantization_config=int8_config()).eval()
    linears = {name: type(module.weight) for name, module in int8.named_modules() if isinstance(module, nn.Linear)}
    assert len(linears) == 2 + 4 * int8.config.num_hidden_layers  # projection, head, 4 per block
    assert all(kind.__name__ == "Int8Tensor" for kind in linears.values()), linears
    assert int8.config.quantization_config.quant_method == "torchao"
    images = torch.randn(16, 3, 20, 20)
    with torch.inference_mode():
        expected, logits = model(images).logits, int8(images).logits
    assert logits.dtype == torch.float32
    assert (logits - expected).abs().max() <= 0.02 * expected.abs().max()
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))
