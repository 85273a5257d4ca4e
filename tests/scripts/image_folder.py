"""JPEG files read and decoded through PIL in a dataset's __getitem__, shuffled by a seeded
generator, under --workers N; prints a digest of every batch (its indices and pixel sum),
so that a run with fastmon can be compared with one without it. --folder: the JPEGs made
beforehand (then, as in ImageFolder, this process opens no image before its DataLoader is
built: Pillow imports its decoders at the first open)."""
import argparse
import hashlib
import os
import tempfile

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--images", type=int, default=96)
parser.add_argument("--folder", help="the JPEGs, made beforehand (make_images)")
args = parser.parse_args()


class JpegFolder(Dataset):
    def __init__(self, folder):
        self.paths = sorted(os.path.join(folder, name) for name in os.listdir(folder))

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with Image.open(self.paths[i]) as image:
            pixels = torch.frombuffer(bytearray(image.convert("RGB").tobytes()), dtype=torch.uint8)
        return pixels.float().reshape(64, 64, 3).mean(dim=2).flatten()[:32] / 255, i


def make_images(folder: str, count: int) -> None:
    noise = torch.Generator().manual_seed(0)
    for i in range(count):
        data = torch.randint(0, 256, (64, 64, 3), dtype=torch.uint8, generator=noise).numpy()
        Image.fromarray(data).save(os.path.join(folder, f"{i:04d}.jpg"), quality=90)


def main():
    folder = args.folder
    if folder is None:
        folder = tempfile.mkdtemp()
        make_images(folder, args.images)
    loader = DataLoader(JpegFolder(folder), batch_size=8, shuffle=True, num_workers=args.workers,
                        generator=torch.Generator().manual_seed(1))
    torch.manual_seed(2)
    model = torch.nn.Linear(32, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        for x, i in loader:
            digest = hashlib.sha1(x.numpy().tobytes()).hexdigest()[:12]
            print(f"batch {i.tolist()} {digest}", flush=True)
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), i % 2).backward()
            optimizer.step()
    print(f"weights {hashlib.sha1(model.weight.detach().numpy().tobytes()).hexdigest()[:12]}")


if __name__ == "__main__":
    main()
