"""The training loss as scripts print it, read from their output (fastmon.printed_loss)."""

import pytest

from fastmon.printed_loss import printed_losses


@pytest.mark.parametrize("line, losses", [
    ("iter 110: loss 4.1800, time 12.65ms, mfu 31.06%", [4.18]),  # nanoGPT
    ("{'loss': 4.18, 'grad_norm': 1.25, 'learning_rate': 5e-05, 'epoch': 0.5}", [4.18]),  # transformers' Trainer
    ("{'loss': '6.858', 'grad_norm': '0.3509', 'epoch': '0.7812'}", [6.858]),  # ... newer ones quote the values
    ("Epoch 0:  40%|████      | 20/50 [00:01<00:02, 15.1it/s, v_num=0, train_loss=0.231]", [0.231]),  # Lightning
    ("step 250: train loss 4.17, val loss 4.18", [4.17]),  # the training one, not the validation one
    ("{'eval_loss': 3.2, 'eval_runtime': 1.0}", []),
    ("Epoch 1 val_loss: 0.7 test loss 0.8", []),
    ("Loss: 1.5e-3", [0.0015]),
    ("loss_scale 65536 · losses 3", []),
    ("step 1 loss 2.0\rstep 2 loss 1.5", [1.5]),  # a progress bar redrawn: what the terminal shows
    ("loss 2.0\nloss 1.0\n", [2.0, 1.0]),
])
def test_the_training_loss_is_read_as_printed(line, losses):
    assert printed_losses(line) == losses
