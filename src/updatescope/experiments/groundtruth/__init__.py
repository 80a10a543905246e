"""Ground truth from actual fine-tuning: the output head alone (:mod:`.head`) or LoRA
adapters on the last decoder blocks (:mod:`.lora`)."""
