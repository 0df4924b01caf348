"""llama.cpp's draft GGUF, in one home (issue 34): reading (``gguf_file``: the bounded header reader, a GGUF drafter
as a checkpoint; ``gguf_keys``: its metadata as a config), writing (``gguf_writer``: the staged single-file writer;
``gguf_output``: the GGUF layout's writer, llama.cpp's storage rules and metadata), the target's tokenizer and
metadata (``gguf_target``) and llama.cpp's BPE pre-tokenizer hash table (``gguf_bpe_pre``, generated).

It sits below the layouts: the GGUF layout (:mod:`eagleconv.formats.gguf`, its tensor table) names
``gguf_output.GgufOutput`` as its writer, and the readers pass ``gguf_file.open_if_gguf`` to ``io.reader``.
"""
