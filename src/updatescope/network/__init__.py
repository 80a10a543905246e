"""Beyond the head: per-layer Fisher sketches and the full-network Fisher decomposition.

- ``decompose``: full vs block-diagonal alignment, per-block profile, profile cosine,
  off-diagonal shares and the bound linking them (pure function of block inner products).
- ``exact``: the exact block inner products by the Gram identity (float64, row blocks).
- ``features`` / ``sketch``: per-token and per-sequence random features of linear-layer
  gradients on the head sketch's maps, and the mergeable ``NetworkSketch``.
- ``capture``: (activation, output gradient) of chosen ``nn.Linear`` layers, one forward +
  one backward per batch.
- ``api``: ``network_config`` / ``sketch_layers``: sketch a model's chosen layers (names or
  fnmatch patterns) over a stream of batches.
- ``io``: network signature files (safetensors, one entry per layer, names in the metadata).
"""

from updatescope.network.api import causal_lm_labels, network_config, sketch_layers
from updatescope.network.capture import LinearGrads, capture_linear_grads, match_linear_layers
from updatescope.network.decompose import NetworkAlignment, decompose
from updatescope.network.exact import BlockProducts, exact_block_products, exact_network_alignment
from updatescope.network.features import layer_config, layer_maps, layer_seed, linear_projections
from updatescope.network.io import NETWORK_FORMAT, load_network_signature, save_network_signature
from updatescope.network.sketch import NetworkConfig, NetworkSketch, network_alignment

__all__ = [
    "NETWORK_FORMAT",
    "causal_lm_labels",
    "load_network_signature",
    "network_config",
    "save_network_signature",
    "sketch_layers",
    "BlockProducts",
    "LinearGrads",
    "NetworkAlignment",
    "NetworkConfig",
    "NetworkSketch",
    "capture_linear_grads",
    "decompose",
    "exact_block_products",
    "exact_network_alignment",
    "layer_config",
    "layer_maps",
    "layer_seed",
    "linear_projections",
    "match_linear_layers",
    "network_alignment",
]
