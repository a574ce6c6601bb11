"""The one layer that calls llama-cpp-python or binds llama.cpp/ggml symbols.

  build.py          which llama.cpp build this process loads (CPU or CUDA), before anything imports llama_cpp
  model.py          a loaded GGUF model: metadata, vocabulary, tokenizer
  context.py        a decoding context (one KV stream per sequence) and its token batch
  draft_context.py  a DFlash draft's context: KV injection, block decode, lattice rows / logits
  sampler.py        the one sampler chain, for plain sampling and the speculative target distribution
  grammar.py        a GBNF grammar sampler applied to the target's logits
  chat_template.py  the model's chat template, rendered by llama-cpp-python's Jinja2 formatter
  ext.py            the staging (C++-mangled) DFlash functions of libllama
  ggml.py           ggml's device registry and llama.cpp's build facts

Everything else in the engine talks to these classes, never to `llama_cpp` itself
(tests/test_layering.py holds that).
"""
