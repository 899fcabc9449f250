"""Diagnostics monitors: what a format does to tensors, gradients, weights and curvature during training."""
