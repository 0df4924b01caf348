"""llama.cpp's draft GGUF: the writer (``gguf_output``), the target's tokenizer and metadata (``gguf_target``)
and llama.cpp's BPE pre-tokenizer hash table (``gguf_bpe_pre``, generated).

The GGUF byte format itself (the bounded reader, the single-file writer) is in :mod:`eagleconv.io`, which every
reader opens through, and the layout's name and key tables in :mod:`eagleconv.formats.gguf`.
"""
