"""A torchrun DDP job (gloo, CPU) as a user writes it, with the opt-in line in each rank."""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

import memprobe


class Annotations(Dataset):
    def __init__(self, n):
        self.records = [
            {"image_id": i, "file_name": f"train2017/{i:012d}.jpg", "bbox": [i * 0.5, 1.0, 20.0, 30.0]}
            for i in range(n)
        ]
        self.captions = [f"caption {i} never read by any worker " * 2 for i in range(n)]

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        r = self.records[i]
        return torch.tensor(r["bbox"]), r["image_id"]


def main():
    dist.init_process_group("gloo")
    ds = Annotations(150_000)
    memprobe.mark_dataset(ds)
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, batch_size=256, sampler=sampler, num_workers=2)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            memprobe.mark(len(y))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
