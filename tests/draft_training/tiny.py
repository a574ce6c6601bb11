"""What the draft-training tests share: the test model's taps, a handful of shop prompts (English
and Traditional Chinese) and the draft flashdesk ships for SmolLM2."""

from pathlib import Path

TAPS = (2, 9, 15, 21, 28)  # default_target_layers(30): SmolLM2-135M's
PROMPTS = [{"id": f"p{i}", "messages": [{"role": "user", "content": c}]} for i, c in enumerate([
    "Write a work order: 300 flyers, A5, glossy, due Monday.",
    "請回覆客戶：訂單會延遲兩天。",
    "What is 15% of 240?",
    "Give a Python function that sums a list of prices.",
    "Reply to Lin Metalworks: their brackets ship tomorrow.",
    "Summarise: the press broke, we fixed it, orders are on time.",
])]
SHIPPED = Path(__file__).resolve().parents[2] / "engine" / "drafts" / "smollm2-dflash2.gguf"
