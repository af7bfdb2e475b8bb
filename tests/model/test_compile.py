"""torch.compile: the model compiles as one graph (no graph breaks), forward and backward, with the same logits."""

import pytest
import torch

from modeling_vit_scratch import ViTScratchForImageClassification


@pytest.mark.integration
def test_compiled_model_is_one_graph_and_computes_the_same(config):
    model = ViTScratchForImageClassification(config).eval()
    images, labels = torch.randn(4, 3, 20, 20), torch.tensor([0, 1, 2, 3])
    expected = model(images, labels=labels)
    compiled = torch.compile(model, fullgraph=True)  # a graph break raises instead of falling back
    outputs = compiled(images, labels=labels)
    assert (outputs.logits - expected.logits).abs().max() < 1e-5
    assert (outputs.loss - expected.loss).abs() < 1e-5
    outputs.loss.backward()
    assert all(parameter.grad is not None for parameter in model.parameters())
