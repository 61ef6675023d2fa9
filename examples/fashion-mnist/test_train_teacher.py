"""The teacher script's progress line (train_teacher.py).

    .venv/bin/python -m unittest examples/fashion-mnist/test_train_teacher.py
"""
import unittest

from distill_tools.fashion_mnist import train_teacher


class Progress(unittest.TestCase):
    def test_the_line_gives_the_share_the_rate_and_the_time_left(self):
        # 12,800 images in 31.2 s: 410 images/s; 47,200 left take 115 s
        # 60,000 images in batches of 128: 469 batches, the last of 96; 100 done, 369 left
        line = train_teacher.progress_line(1, 8, 12_800, 60_000, 31.2)
        self.assertEqual(line, "epoch 1/8 [####................] batch 100/469, 369 left: "
                               "12,800/60,000 images (21%), 410 images/s, 1 min 55 s left")

    def test_under_a_minute_left_and_no_time_yet(self):
        # 54,000 images are 421.875 batches of 128: the 422nd is under way, 47 left
        self.assertEqual(train_teacher.progress_line(8, 8, 54_000, 60_000, 60.0),
                         "epoch 8/8 [##################..] batch 422/469, 47 left: "
                         "54,000/60,000 images (90%), 900 images/s, 7 s left")
        self.assertEqual(train_teacher.progress_line(1, 8, 128, 60_000, 0.0),
                         "epoch 1/8 [....................] batch 1/469, 468 left: "
                         "128/60,000 images (0%), 0 images/s, 0 s left")

    def test_the_batches_follow_the_batch_size(self):
        # batches of 1,000: 60 in the epoch, 30 done
        self.assertEqual(train_teacher.progress_line(2, 8, 30_000, 60_000, 10.0, 1000),
                         "epoch 2/8 [##########..........] batch 30/60, 30 left: "
                         "30,000/60,000 images (50%), 3,000 images/s, 10 s left")


if __name__ == "__main__":
    unittest.main()
