"""What config.json files state, below the architectures that read them.

``config_fields``: the typed fields a drafter's config may state (the architectures' config models are built
from them, and :mod:`eagleconv.readers.schemas` publishes them); ``target``: the target model's config.json,
read by the one reader (hidden size, vocabulary, layer count).
"""
