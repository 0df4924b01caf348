"""Reading the Hub: what ``hf://ORG/NAME[@REV]`` paths need, below the readers that take them.

validate, inspect, lint, convert and ``open_checkpoint`` take ``hf://`` paths, so reading the Hub sits below them
(and above ``spec``, whose reports it fills); ``eagleconv.hub`` (push, pull, audit) builds on it.  One job a module:
``base`` (errors, the manifest's names, the endpoint, cache and offline mode as the environment says now),
``timeouts`` (every Hub request bounded), ``manifest`` (build and verify ``MANIFEST.json``), ``download``
(snapshots through huggingface_hub's cache; ``local_path``: ``hf://`` -> the verified snapshot), ``ranges``
(bounded range reads) and ``remote`` (``hf://`` read from its config, index and safetensors headers).
Nothing is re-exported here: callers import the module that holds what they use.
"""
