"""Training DFlash 2 drafts for a target model on the user's own machine (issue 4).

So far: `prompts` (the prompt mix the target answers for self-distillation). The data
capture, the PyTorch draft and its training are the optional extra `[train]`.
"""
