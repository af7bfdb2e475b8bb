"""LoRA with peft: the attention and MLP projections train, the rest stays frozen, under both checkpointing modes;
the merged model saves and reloads like any vit-scratch model."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import PROCESS_TIMEOUT, tiny_config
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForImageClassification, Trainer, TrainingArguments

from modeling_vit_scratch import ViTScratchForImageClassification

LORA_MODULES = ["qkv_proj", "o_proj", "fc1", "fc2"]  # ViTScratchAttention and ViTScratchMLP's nn.Linear layers
RANK = 4
STEPS = 6


# new processes, scripts or whole suites: `make test` runs them, `make test-fast` leaves them out
pytestmark = pytest.mark.integration


def lora_model(checkpointing: str | None = None):
    """A tiny classifier with LoRA on the four projections and a trained head; `checkpointing` is None, "reentrant"
    or "non-reentrant", switched on before `get_peft_model`, which then calls `enable_input_require_grads()` itself
    (it hooks `get_input_embeddings()`, the patch embedding). Seeded, so two calls build the same weights."""
    torch.manual_seed(0)
    model = ViTScratchForImageClassification(tiny_config())
    if checkpointing is not None:
        model.activation_checkpointing_enable({"use_reentrant": checkpointing == "reentrant"})
    config = LoraConfig(r=RANK, lora_alpha=2 * RANK, target_modules=LORA_MODULES, modules_to_save=["classifier"])
    return get_peft_model(model, config)


def batch(size: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(size, 3, 20, 20, generator=generator), torch.randint(0, 5, (size,), generator=generator)


def train_steps(model, steps: int = STEPS) -> list[float]:
    """A few AdamW steps on one fixed batch; the losses before each step."""
    pixel_values, labels = batch()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    losses = []
    for _ in range(steps):
        loss = model(pixel_values=pixel_values, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def test_lora_wraps_exactly_the_four_projections_of_every_block():
    model = lora_model()
    wrapped = sorted(name for name, module in model.named_modules() if hasattr(module, "lora_A"))
    layers = model.base_model.model.config.num_hidden_layers
    expected = sorted(
        f"base_model.model.vit.layers.{i}.{where}"
        for i in range(layers)
        for where in ("attention.qkv_proj", "attention.o_proj", "mlp.fc1", "mlp.fc2")
    )
    assert wrapped == expected
    trainable, total = model.get_nb_trainable_parameters()
    config = tiny_config()
    hidden, mlp, labels = config.hidden_size, config.intermediate_size, config.num_labels
    per_block = RANK * ((hidden + 3 * hidden) + (hidden + hidden) + (hidden + mlp) + (mlp + hidden))
    assert trainable == layers * per_block + hidden * labels + labels  # LoRA A and B, plus the head
    assert total == trainable + ViTScratchForImageClassification(config).num_parameters()


@pytest.mark.parametrize("checkpointing", [None, "reentrant", "non-reentrant"])
def test_lora_trains_only_the_adapters_and_the_head(checkpointing):
    """Loss falls, every LoRA matrix and the head copy move, every base weight stays bit for bit; with activation
    checkpointing the losses are those of the run without it, and each block's attention really runs twice per step
    (the MLP's end is not: non-reentrant recomputation stops once it has every tensor the backward pass needs)."""
    model = lora_model(checkpointing)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    attention_calls = []
    model.base_model.model.vit.layers[0].attention.register_forward_hook(lambda *_: attention_calls.append(1))
    losses = train_steps(model)
    assert losses[-1] < 0.8 * losses[0], losses
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name or "modules_to_save" in name for name in trainable)
    for name, parameter in model.named_parameters():
        changed = not torch.equal(parameter, before[name])
        assert changed == (name in trainable), name
    assert len(attention_calls) == (2 if checkpointing else 1) * STEPS  # backward recomputes checkpointed blocks
    if checkpointing:
        torch.testing.assert_close(losses, train_steps(lora_model(None)), rtol=1e-5, atol=1e-6)


def test_enable_input_require_grads_lets_reentrant_checkpointing_switched_on_after_peft_train_the_blocks():
    """The workaround for checkpointing switched on after `get_peft_model` (as the Trainer does): the hook makes the
    frozen patch embedding's output need a gradient, so every block's backward runs and its LoRA matrices get one."""
    model = lora_model()
    model.base_model.model.activation_checkpointing_enable({"use_reentrant": True})
    model.enable_input_require_grads()
    patch_outputs = []
    model.get_input_embeddings().register_forward_hook(lambda module, inputs, output: patch_outputs.append(output))
    pixel_values, labels = batch()
    model.train()(pixel_values=pixel_values, labels=labels).loss.backward()
    assert not model.get_input_embeddings().projection.weight.requires_grad and patch_outputs[0].requires_grad
    lora_b_grads = [p.grad for name, p in model.named_parameters() if "lora_B" in name]  # A's is 0 while B is 0
    assert len(lora_b_grads) == 4 * model.config.num_hidden_layers
    assert all(grad is not None and grad.abs().sum() > 0 for grad in lora_b_grads)


class FixedImages(torch.utils.data.Dataset):
    """`batch(size)` as a data set of {"pixel_values": (3, 20, 20), "labels": ()} items for the Trainer."""

    def __init__(self, size: int):
        self.pixel_values, self.labels = batch(size)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": self.pixel_values[index], "labels": self.labels[index]}


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_the_trainer_trains_every_lora_matrix_under_its_activation_checkpointing(tmp_path, use_reentrant):
    """The Trainer switches checkpointing on after `get_peft_model` (`--activation_checkpointing`): the path where
    reentrant checkpointing would leave every LoRA matrix untouched and train the head alone."""
    model = lora_model()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=4,
        per_device_train_batch_size=6,
        learning_rate=1e-2,
        save_strategy="no",
        activation_checkpointing=True,
        activation_checkpointing_kwargs={"use_reentrant": use_reentrant},
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
    )
    Trainer(model=model, args=args, train_dataset=FixedImages(12)).train()
    assert model.base_model.model.vit.layers[0].gradient_checkpointing
    untouched = [name for name, p in model.named_parameters() if p.requires_grad and torch.equal(p, before[name])]
    assert untouched == []
    changed = [name for name, p in model.named_parameters() if not p.requires_grad and not torch.equal(p, before[name])]
    assert changed == []


@pytest.mark.slow
def test_merged_model_saves_and_reloads_to_the_same_logits(tmp_path):
    model = lora_model("non-reentrant")
    train_steps(model)
    model.eval()
    pixel_values, _ = batch(4)
    with torch.no_grad():
        adapted = model(pixel_values=pixel_values).logits
    merged = model.merge_and_unload()
    assert type(merged) is ViTScratchForImageClassification
    assert not any("lora" in name or "modules_to_save" in name for name, _ in merged.named_parameters())
    with torch.no_grad():
        logits = merged(pixel_values=pixel_values).logits
    torch.testing.assert_close(logits, adapted, rtol=1e-5, atol=1e-5)  # merging W + BA only reorders float sums

    merged.activation_checkpointing_disable()  # a training setting, not part of the saved model
    merged.save_pretrained(tmp_path / "merged")
    reloaded = AutoModelForImageClassification.from_pretrained(tmp_path / "merged").eval()
    assert type(reloaded) is ViTScratchForImageClassification
    with torch.no_grad():
        assert torch.equal(reloaded(pixel_values=pixel_values).logits, logits)
    assert torch.equal(load_in_fresh_process(tmp_path / "merged", pixel_values, tmp_path), logits)


FRESH_PROCESS = textwrap.dedent(
    """
    import sys
    sys.modules["modeling_vit_scratch"] = None  # the package is absent: importing it would raise ImportError
    sys.modules["peft"] = None  # and so is peft: a merged model needs neither
    import torch
    from transformers import AutoModelForImageClassification, Trainer, TrainingArguments
    folder, inputs, outputs = sys.argv[1:4]
    model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    with torch.no_grad():
        torch.save(model(torch.load(inputs)).logits, outputs)
    """
)


def load_in_fresh_process(folder, pixel_values: torch.Tensor, tmp_path) -> torch.Tensor:
    """The logits of `folder` loaded with trust_remote_code in a new process where the package and peft are absent."""
    script, inputs, outputs = tmp_path / "load.py", tmp_path / "inputs.pt", tmp_path / "outputs.pt"
    script.write_text(FRESH_PROCESS)
    torch.save(pixel_values, inputs)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, str(script), str(folder), str(inputs), str(outputs)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(outputs)
