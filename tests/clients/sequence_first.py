"""pytorch/examples' word_language_model: an LSTM fed (bptt, batch) slices of a corpus
by get_batch, sequence first, with hidden state carried between batches."""
import time

import torch
from torch import nn

TOKENS, BATCH, BPTT, EPOCHS = 20 * 35 * 20 + 1, 20, 35, 2
torch.manual_seed(0)
corpus = torch.randint(0, 50, (TOKENS,))
data = corpus[: (TOKENS // BATCH) * BATCH].view(BATCH, -1).t().contiguous()  # (time, batch)


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.rnn, self.decoder = nn.Embedding(50, 32), nn.LSTM(32, 32), nn.Linear(32, 50)

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out), hidden


model = RNNModel()
optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
started = time.perf_counter()
steps = 0
for epoch in range(EPOCHS):
    hidden = None
    for i in range(0, data.size(0) - 1, BPTT):
        length = min(BPTT, data.size(0) - 1 - i)
        x, y = data[i:i + length], data[i + 1:i + 1 + length]
        if hidden is not None:
            hidden = tuple(h.detach() for h in hidden)
        optimizer.zero_grad()
        out, hidden = model(x, hidden)
        nn.functional.cross_entropy(out.view(-1, 50), y.reshape(-1)).backward()
        optimizer.step()
        steps += 1
print(f"steps {steps} samples {steps * BATCH} sequences of {BPTT}")
print(f"seconds {time.perf_counter() - started:.4f}")
