"""distill_tools.fashion_mnist: the image demo (Fashion-MNIST data and teacher CNN)."""
