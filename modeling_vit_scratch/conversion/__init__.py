"""Conversion of timm and transformers ViT checkpoints to vit-scratch and back; needs nothing from training."""
