"""Beyond the head: per-layer Fisher sketches and the full-network Fisher decomposition.

- ``decompose``: full vs block-diagonal alignment, per-block profile, profile cosine,
  off-diagonal shares and the bound linking them (pure function of block inner products).
- ``exact``: the exact block inner products by the Gram identity (float64, row blocks).
- ``features`` / ``sketch``: per-token and per-sequence random features of linear-layer
  gradients on the head sketch's maps, and the mergeable ``NetworkSketch``.
- ``capture``: (activation, output gradient) of chosen ``nn.Linear`` layers, one forward +
  one backward per batch.
"""
from updatescope.network.capture import LinearGrads, capture_linear_grads, match_linear_layers
from updatescope.network.decompose import NetworkAlignment, decompose
from updatescope.network.exact import BlockProducts, exact_block_products, exact_network_alignment
from updatescope.network.features import layer_config, layer_maps, layer_seed, linear_projections
from updatescope.network.sketch import NetworkConfig, NetworkSketch, network_alignment

__all__ = ["BlockProducts", "LinearGrads", "NetworkAlignment", "NetworkConfig", "NetworkSketch", "capture_linear_grads",
           "decompose", "exact_block_products", "exact_network_alignment", "layer_config", "layer_maps", "layer_seed",
           "linear_projections", "match_linear_layers", "network_alignment"]
