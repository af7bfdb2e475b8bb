"""transformers' own common tests (ModelTesterMixin, ConfigTester, ImageProcessingTestMixin) of the installed version,
run against our classes the way transformers' tests/models/vit/test_modeling_vit.py runs them against ViT.

Twice: here against the package's classes, and (`test_the_remote_code_classes_pass_in_a_fresh_process`) in a new
pytest process where the package cannot be imported, against the classes `trust_remote_code=True` loads from a
saved folder. The same test classes serve both: `VIT_SCRATCH_REMOTE_FOLDER` switches where the classes come from.
The common test files are fetched from transformers' source release on PyPI (tests/model/transformers_common.py).
Every skip below says why; docs/testing.md lists them.
"""

import os
import pickle
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

REMOTE_FOLDER = os.environ.get("VIT_SCRATCH_REMOTE_FOLDER")
if REMOTE_FOLDER:  # the child process: the package is absent, importing it would raise ImportError
    sys.modules["modeling_vit_scratch"] = None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
import transformers_common
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoImageProcessor
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES as IMAGE_CLASSIFIERS,
)
from transformers.models.auto.modeling_auto import (
    MODEL_MAPPING_NAMES,
)

transformers_common.load()
from transformers_common_tests.test_configuration_common import ConfigTester
from transformers_common_tests.test_image_processing_common import (
    ImageProcessingTester,
    ImageProcessingTestMixin,
)
from transformers_common_tests.test_modeling_common import ModelTesterMixin, floats_tensor, ids_tensor

# new processes, scripts or whole suites: `make test` runs them, `make test-fast` leaves them out
pytestmark = pytest.mark.integration


def remote_classes(folder: str) -> tuple:
    """Config, base model, classifier and image processor classes as `trust_remote_code=True` loads them (the Auto
    classes, which also register what they load, as in a user's process)."""
    from transformers import AutoConfig, AutoModel, AutoModelForImageClassification

    config_class = type(AutoConfig.from_pretrained(folder, trust_remote_code=True))
    model_classes = tuple(
        type(auto_class.from_pretrained(folder, trust_remote_code=True))
        for auto_class in (AutoModel, AutoModelForImageClassification)
    )
    processor_class = type(AutoImageProcessor.from_pretrained(folder, trust_remote_code=True))
    for cls in (config_class, *model_classes, processor_class):
        if not cls.__module__.startswith("transformers_modules"):
            raise RuntimeError(f"{cls} was not loaded from {folder}'s code")
    return config_class, *model_classes, processor_class


if REMOTE_FOLDER:
    ConfigClass, ModelClass, ClassifierClass, ProcessorClass = remote_classes(REMOTE_FOLDER)
else:
    from modeling_vit_scratch import (
        ViTScratchConfig as ConfigClass,
    )
    from modeling_vit_scratch import (
        ViTScratchForImageClassification as ClassifierClass,
    )
    from modeling_vit_scratch import (
        ViTScratchImageProcessor as ProcessorClass,
    )
    from modeling_vit_scratch import (
        ViTScratchModel as ModelClass,
    )
# the two-headed classifier lives in the classifier's file, wherever that was loaded from
TeacherClassifierClass = sys.modules[ClassifierClass.__module__].ViTScratchForImageClassificationWithTeacher


class ViTScratchModelTester:
    """Tiny odd-sized models and random inputs for the mixin, in the spirit of transformers' ViTModelTester."""

    def __init__(
        self,
        parent,
        batch_size=5,
        image_size=30,
        patch_size=3,
        num_channels=3,
        hidden_size=36,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=37,
        num_labels=7,
        **options,
    ):
        self.parent = parent
        self.options = options  # the config's other fields (position_embedding, pooling, ...)
        self.batch_size = batch_size
        self.image_size = image_size
        self.patch_size = patch_size
        self.num_channels = num_channels
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.num_labels = num_labels
        self.is_training = True
        grid_h, grid_w = self.get_config().grid_size  # cells of a stem's feature map for a hybrid
        self.seq_length = grid_h * grid_w + self.get_config().num_prefix_tokens  # patches, class (distillation) token

    def get_config(self):
        return ConfigClass(
            image_size=self.image_size,
            patch_size=self.patch_size,
            num_channels=self.num_channels,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            hidden_dropout_prob=0.1,
            attention_probs_dropout_prob=0.1,
            num_labels=self.num_labels,
            attn_implementation="eager",
            **self.options,
        )

    def prepare_config_and_inputs(self):
        pixel_values = floats_tensor([self.batch_size, self.num_channels, self.image_size, self.image_size])
        labels = ids_tensor([self.batch_size], self.num_labels)
        return self.get_config(), pixel_values, labels

    def prepare_config_and_inputs_for_common(self):
        config, pixel_values, _ = self.prepare_config_and_inputs()
        return config, {"pixel_values": pixel_values}


class ViTScratchModelTest(ModelTesterMixin, unittest.TestCase):
    """ModelTesterMixin with test_modeling_vit.py's flags: no resizable token embeddings, no inputs_embeds."""

    all_model_classes = (ModelClass, ClassifierClass)
    test_resize_embeddings = False
    test_torch_exportable = True
    # the mixin runs this only for models whose files carry a copyright of 2023 or later; ours carry none, so opt in
    test_can_init_all_missing_weights_before_2023 = True

    def setUp(self):
        # The mixin tells a base model from a classifier by looking the class name up in transformers' registries,
        # where ViTModel and ViTForImageClassification are; ours are entered there for the test's duration.
        for names, model_class in ((MODEL_MAPPING_NAMES, ModelClass), (IMAGE_CLASSIFIERS, ClassifierClass)):
            registry = mock.patch.dict(names, {ConfigClass.model_type: model_class.__name__})
            registry.start()
            self.addCleanup(registry.stop)
        self.model_tester = ViTScratchModelTester(self)
        # hidden_size=37 as transformers' ViT test; one head, since the config refuses a width the heads do not divide
        self.config_tester = ConfigTester(
            self, config_class=ConfigClass, has_text_modality=False, hidden_size=37, num_attention_heads=1
        )

    def test_config(self):
        self.config_tester.run_common_tests()

    @unittest.skip(reason="a ViT takes pixel_values, it has no inputs_embeds (as transformers' ViT test)")
    def test_inputs_embeds(self):
        pass

    def test_model_get_set_embeddings(self):
        """Overridden as transformers' ViT test does: the mixin's version expects a text model's nn.Embedding; a ViT's
        input embedding is its patch embedding module."""
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(config)
            self.assertIsInstance(model.get_input_embeddings(), nn.Module)
            output_embeddings = model.get_output_embeddings()
            self.assertTrue(output_embeddings is None or isinstance(output_embeddings, nn.Linear))

    def test_torch_export(self):
        """In place of ExportTesterMixin (not in the source release, see transformers_common.py): with
        `test_torch_exportable` set, as for ViT, each class exports with torch.export and computes what eager does."""
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(config).eval()
            with torch.no_grad():
                expected = model(**inputs)
                exported = torch.export.export(model, args=(), kwargs=inputs, strict=False)
                outputs = exported.module()(**inputs)
            first = "last_hidden_state" if "last_hidden_state" in expected else "logits"
            torch.testing.assert_close(outputs[first], expected[first])

    def test_model(self):
        config, pixel_values, _ = self.model_tester.prepare_config_and_inputs()
        tester = self.model_tester
        model = ModelClass(config).eval()
        with torch.no_grad():
            result = model(pixel_values)
        self.assertEqual(result.last_hidden_state.shape, (tester.batch_size, tester.seq_length, tester.hidden_size))

    def test_for_image_classification(self):
        config, pixel_values, labels = self.model_tester.prepare_config_and_inputs()
        model = ClassifierClass(config).eval()
        with torch.no_grad():
            result = model(pixel_values, labels=labels)
        self.assertEqual(result.logits.shape, (self.model_tester.batch_size, self.model_tester.num_labels))
        self.assertTrue(torch.isfinite(result.loss))
        # grayscale, as transformers' ViT test
        config.num_channels = 1
        model = ClassifierClass(config).eval()
        with torch.no_grad():
            result = model(floats_tensor([self.model_tester.batch_size, 1, config.image_size, config.image_size]))
        self.assertEqual(result.logits.shape, (self.model_tester.batch_size, self.model_tester.num_labels))


class ViTScratchOptionsModelTest(ViTScratchModelTest):
    """The same tests with every architecture option away from its default: fixed sine-cosine positions, a linear
    patch embedding, mean pooling with fc_norm, no query/key/value bias, stochastic depth."""

    def setUp(self):
        super().setUp()
        self.model_tester = ViTScratchModelTester(
            self,
            position_embedding="sincos",
            patch_embedding="linear",
            pooling="mean",
            fc_norm=True,
            qkv_bias=False,
            drop_path_rate=0.1,
        )


class ViTScratchHybridModelTest(ViTScratchModelTest):
    """The same tests for a hybrid: Xiao et al.'s conv stem (a 3x3 conv of stride 2, BatchNorm, ReLU) before the
    projection, which cuts its 15x15 feature map into 5x5 patches of 3x3 cells."""

    def setUp(self):
        super().setUp()
        self.model_tester = ViTScratchModelTester(self, stem="conv", stem_channels=[5])


class ViTScratchDistilledModelTest(ViTScratchModelTest):
    """The same tests for DeiT's layout, a distillation token after the class token, with the two-headed classifier
    as a third model class."""

    all_model_classes = (ModelClass, ClassifierClass, TeacherClassifierClass)

    def setUp(self):
        super().setUp()
        # both classifiers in the registry, as transformers lists DeiT's, so the mixin trains both with labels
        names = (ClassifierClass.__name__, TeacherClassifierClass.__name__)
        registry = mock.patch.dict(IMAGE_CLASSIFIERS, {ConfigClass.model_type: names})
        registry.start()
        self.addCleanup(registry.stop)
        self.model_tester = ViTScratchModelTester(self, distillation_token=True)


class ViTScratchImageProcessingTester(ImageProcessingTester):
    """Random images of odd sizes for a processor that resizes them to 18x18."""

    def __init__(self, parent, **kwargs):
        kwargs.setdefault("size", {"height": 18, "width": 18})
        kwargs.setdefault("batch_size", 5)
        kwargs.setdefault("min_resolution", 13)
        kwargs.setdefault("max_resolution", 41)
        super().__init__(parent, **kwargs)

    def _get_image_processing_classes(self) -> dict:
        # the mixin looks processors up by the test file's folder name in transformers' own registry
        return {"pil": ProcessorClass}

    def expected_output_image_shape(self, images):
        return self.num_channels, self.size["height"], self.size["width"]


class ViTScratchImageProcessingTest(ImageProcessingTestMixin, unittest.TestCase):
    image_processor_tester_class = ViTScratchImageProcessingTester

    @unittest.skip(
        reason="a policy for image processors added to transformers after 2025-09 (they must ship a "
        "torchvision backend): ours ships one, registered only where torchvision is installed, which this "
        "environment lacks; tests/model/test_image_processing_fast.py covers it in .venv-timm"
    )
    def test_new_models_require_torchvision_backend(self):
        pass

    def test_image_processor_save_load_with_autoimageprocessor(self):
        """The mixin's test; for remote code, AutoImageProcessor must refuse the saved folder's code without
        `trust_remote_code=True` and load it with it."""
        if not REMOTE_FOLDER:
            return super().test_image_processor_save_load_with_autoimageprocessor()
        first = ProcessorClass(**self.image_processor_dict)
        with tempfile.TemporaryDirectory() as folder:
            first.save_pretrained(folder)
            with self.assertRaisesRegex(ValueError, "trust_remote_code=True"):
                AutoImageProcessor.from_pretrained(folder, backend="pil", trust_remote_code=False)
            second = AutoImageProcessor.from_pretrained(folder, backend="pil", trust_remote_code=True)
        self.assertEqual(second.to_dict(), first.to_dict())

    def test_pil_can_run_without_torchvision(self):
        """The mixin's test (slow there) for a processor that is not part of transformers: a new process where
        torchvision and this package cannot be imported loads the saved processor by `trust_remote_code=True` and
        gives the same outputs."""
        processor = ProcessorClass(**self.image_processor_dict)
        inputs = self.image_processor_tester.prepare_processor_inputs(equal_resolution=False)
        expected = processor(**inputs, return_tensors=None)
        with tempfile.TemporaryDirectory() as folder:
            processor.save_pretrained(folder)
            inputs_path, outputs_path = os.path.join(folder, "inputs.pkl"), os.path.join(folder, "outputs.pkl")
            with open(inputs_path, "wb") as file:
                pickle.dump(inputs, file)
            env = {**os.environ, "HF_HOME": os.path.join(folder, "hf_home"), "HF_HUB_OFFLINE": "1"}
            command = [sys.executable, "-c", WITHOUT_TORCHVISION, folder, inputs_path, outputs_path]
            result = subprocess.run(
                command, cwd=folder, env=env, capture_output=True, text=True, timeout=FRESH_PROCESS_TIMEOUT
            )
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            with open(outputs_path, "rb") as file:
                outputs = pickle.load(file)
        np.testing.assert_equal(outputs, expected.data)


# how long a fresh process may take on a loaded 2-core machine (a hang, not speed); tests/support/helpers.py has the
# same for the other rooms, but this file also runs without conftest, where helpers is not importable
FRESH_PROCESS_TIMEOUT = 1800

WITHOUT_TORCHVISION = """
import pickle, sys
sys.modules["torchvision"] = None  # importing either raises ImportError
sys.modules["modeling_vit_scratch"] = None
from transformers import AutoImageProcessor
folder, inputs_path, outputs_path = sys.argv[1:]
processor = AutoImageProcessor.from_pretrained(folder, backend="pil", trust_remote_code=True)
assert type(processor).__module__.startswith("transformers_modules"), type(processor).__module__
with open(inputs_path, "rb") as file:
    inputs = pickle.load(file)
with open(outputs_path, "wb") as file:
    pickle.dump(processor(**inputs, return_tensors=None).data, file)
"""


def test_output_loading_info_reports_a_missing_tensor_but_fine_tuning_still_refuses_it(tmp_path):
    """What the mixin's missing-key tests need (the report, as transformers gives it) without loosening the
    fine-tuning path (`ignore_mismatched_sizes=True`, used by training.py): there only the head may be new."""
    config = ViTScratchModelTester(None).get_config()
    ClassifierClass(config).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["vit.layers.0.mlp.fc1.bias"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    _, info = ClassifierClass.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == {"vit.layers.0.mlp.fc1.bias"}
    for load in (dict(), dict(ignore_mismatched_sizes=True, output_loading_info=True)):
        with pytest.raises(ValueError, match="has no tensor 'vit.layers.0.mlp.fc1.bias' that config.json asks for"):
            ClassifierClass.from_pretrained(tmp_path, **load)


# slow (`make test-slow`): the whole suite again in a new process; `make test` keeps the in-process run and
# tests/model/test_auto.py's fresh-process load by trust_remote_code
@pytest.mark.slow
@pytest.mark.skipif(bool(REMOTE_FOLDER), reason="this is the parent of the remote-code run")
def test_the_remote_code_classes_pass_in_a_fresh_process(tmp_path):
    """The same tests, in a new pytest process without the package, on the classes loaded from a saved folder."""
    from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification, ViTScratchImageProcessor

    config = ViTScratchConfig(
        image_size=12, patch_size=3, hidden_size=12, num_hidden_layers=1, num_attention_heads=3, intermediate_size=13
    )
    folder = tmp_path / "model"
    ViTScratchForImageClassification(config).save_pretrained(folder)
    ViTScratchImageProcessor.for_config(config).save_pretrained(folder)
    env = {
        **os.environ,
        "VIT_SCRATCH_REMOTE_FOLDER": str(folder),
        "HF_HOME": str(tmp_path / "hf_home"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": "",
    }
    # every class and test but the options and hybrid testers, whose code is the same files run on other configs
    # (a hybrid's own code is loaded without the package in tests/model/test_auto.py)
    command = [sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "--noconftest", "-rs"]
    command += ["-k", "not ViTScratchOptionsModelTest and not ViTScratchHybridModelTest"]
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=FRESH_PROCESS_TIMEOUT
    )
    summary = result.stdout[result.stdout.rfind("short test summary") :]
    assert result.returncode == 0, result.stdout[-4000:] + summary[-3000:] + result.stderr[-2000:]
    counts = result.stdout.strip().splitlines()[-1]
    assert int(counts.split(" passed")[0].split()[-1]) > 100, counts  # the mixins ran, not an empty selection
