"""vit-scratch: a Vision Transformer written from scratch, packaged as a Hugging Face model.

Importing the package registers its classes with transformers' Auto classes (its only import-time side effect),
and marks them so that `save_pretrained` writes the model code and an `auto_map` beside the weights.
"""

from transformers import (
    AutoConfig,
    AutoImageProcessor,
    AutoModel,
    AutoModelForImageClassification,
    AutoModelForPreTraining,
)
from transformers.utils import is_torchvision_available

from .configuration_vit_scratch import MODEL_FILES, PRESETS, ViTScratchConfig, auto_map_entry
from .image_processing_vit_scratch import (
    ViTScratchImageClassificationPipeline,
    ViTScratchImageProcessor,
    ViTScratchImageProcessorFast,
)
from .modeling_vit_scratch import (
    ViTScratchForImageClassification,
    ViTScratchForImageClassificationWithTeacher,
    ViTScratchForPreTraining,
    ViTScratchModel,
    ViTScratchPreTrainedModel,
)

AutoConfig.register(ViTScratchConfig.model_type, ViTScratchConfig, exist_ok=True)
AutoModel.register(ViTScratchConfig, ViTScratchModel, exist_ok=True)
# Two heads for one config, as transformers maps DeiT: the class named in config.architectures is built, else the first.
IMAGE_CLASSIFIERS = (ViTScratchForImageClassification, ViTScratchForImageClassificationWithTeacher)
AutoModelForImageClassification.register(ViTScratchConfig, IMAGE_CLASSIFIERS, exist_ok=True)
AutoModelForPreTraining.register(ViTScratchConfig, ViTScratchForPreTraining, exist_ok=True)
# torchvision is picked when installed (transformers' default), or asked for with backend="torchvision"/use_fast=True;
# without torchvision only the PIL class is registered, so transformers falls back to it as for its own models.
PROCESSORS = {"pil": ViTScratchImageProcessor}
if is_torchvision_available():
    PROCESSORS["torchvision"] = ViTScratchImageProcessorFast
AutoImageProcessor.register(ViTScratchConfig, image_processor_classes=PROCESSORS, exist_ok=True)

# save_pretrained writes each class's file (and its relative imports) and an auto_map entry naming it: every class
# marked here lives in one of MODEL_FILES, which auto_map_entry checks.
for model_class, auto_class in (
    (ViTScratchConfig, "AutoConfig"),
    (ViTScratchModel, "AutoModel"),
    (ViTScratchForImageClassification, "AutoModelForImageClassification"),
    (ViTScratchForImageClassificationWithTeacher, "AutoModelForImageClassification"),
    (ViTScratchForPreTraining, "AutoModelForPreTraining"),
    (ViTScratchImageProcessor, "AutoImageProcessor"),
    (ViTScratchImageProcessorFast, "AutoImageProcessor"),
):
    auto_map_entry(model_class)
    model_class.register_for_auto_class(auto_class)
del model_class, auto_class

__all__ = [
    "MODEL_FILES",
    "PRESETS",
    "ViTScratchConfig",
    "ViTScratchForImageClassification",
    "ViTScratchForImageClassificationWithTeacher",
    "ViTScratchForPreTraining",
    "ViTScratchImageClassificationPipeline",
    "ViTScratchImageProcessor",
    "ViTScratchImageProcessorFast",
    "ViTScratchModel",
    "ViTScratchPreTrainedModel",
]
