"""Convert ViT checkpoints to and from vit_scratch.

    python scripts/convert_checkpoint.py --from transformers --input google/vit-base-patch16-224 --output DIR
    python scripts/convert_checkpoint.py --from timm --timm_model vit_base_patch16_224 \
        --input weights.safetensors --output DIR
    python scripts/convert_checkpoint.py --from timm --timm_model vit_base_r50_s16_224 \
        --input weights.safetensors --output DIR      # a hybrid: its ResNet-V2 stem converts too
    python scripts/convert_checkpoint.py --from transformers --input facebook/deit-tiny-distilled-patch16-224 \
        --output DIR                                   # DeiT: distillation token and both heads
    python scripts/convert_checkpoint.py --to transformers --input DIR --output DIR
                                                       # a distilled model (DeiT) is written as transformers' DeiT
    python scripts/convert_checkpoint.py --from transformers --input facebook/vit-mae-base --output DIR
                                                       # ViTMAEForPreTraining <-> our masked autoencoder, both ways

The folder is written in a private folder inside --output, loaded back and its logits (final tokens for a model
without a head) compared with the source model's on random images, in `--dtype` (float32, or bfloat16 with the
looser tolerance the check prints); only then is it moved into place. A folder that already holds a model is
replaced only with --overwrite. timm is needed only for `--from timm` (to build the architecture, without weights).
"""

# imported first, before the command's package (torch, transformers): Ctrl-C meanwhile is one line too
from vit_scratch_command import run

if __name__ == "__main__":
    run("modeling_vit_scratch.conversion.command")
