"""The transformers Trainer on a tiny GPT-2 built from a config (no download), with an
evaluation pass: prints the Trainer's own step count and the samples it trained on.
Arguments: gradient accumulation steps (default 1); --gpu to train on the GPU;
--max-steps N to stop mid-epoch (with a batch fetched ahead that is never trained on);
--tokens all|non_padding: sequences of 8 to 32 tokens padded to 32 (an attention mask), the
Trainer counting its tokens seen (include_num_input_tokens_seen), printed as "tokens N"."""
import sys

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

SAMPLES, BATCH, EPOCHS = 256, 8, 2


class Tokens(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        generator = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 100, (32,), generator=generator)
        if not count_tokens:
            return {"input_ids": ids, "labels": ids}
        mask = torch.zeros(32, dtype=torch.long)
        mask[:int(torch.randint(8, 33, (1,), generator=generator))] = 1
        return {"input_ids": ids * mask, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


class Count(TrainerCallback):
    steps = 0

    def on_step_end(self, args, state, control, **kwargs):
        Count.steps = state.global_step


argv = sys.argv[1:]
count_tokens = argv[argv.index("--tokens") + 1] if "--tokens" in argv else None
max_steps = int(argv[argv.index("--max-steps") + 1]) if "--max-steps" in argv else -1
accumulate = int(next((a for i, a in enumerate(argv) if a.isdigit() and argv[i - 1:i] != ["--max-steps"]), 1))
on_gpu = "--gpu" in argv  # benchmarks/gpu_check.py's hf_trainer check
model = GPT2LMHeadModel(GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                   bos_token_id=0, eos_token_id=0))
args = TrainingArguments(output_dir="hf_out", per_device_train_batch_size=BATCH, num_train_epochs=EPOCHS, max_steps=max_steps,
                         gradient_accumulation_steps=accumulate, eval_strategy="epoch", per_device_eval_batch_size=16,
                         logging_steps=1000, report_to=[], save_strategy="no", use_cpu=not on_gpu,
                         dataloader_num_workers=0, disable_tqdm=True,
                         **({"include_num_input_tokens_seen": count_tokens} if count_tokens else {}))
trainer = Trainer(model=model, args=args, train_dataset=Tokens(SAMPLES), eval_dataset=Tokens(64), callbacks=[Count()])
result = trainer.train()
if count_tokens:
    print(f"tokens {trainer.state.num_input_tokens_seen}")
print(f"steps {Count.steps} samples {SAMPLES * EPOCHS if max_steps < 0 else Count.steps * BATCH * accumulate}")
print(f"seconds {result.metrics['train_runtime']:.4f}")
