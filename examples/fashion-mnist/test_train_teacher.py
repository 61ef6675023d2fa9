"""The teacher script's progress line (train_teacher.py).

    .venv/bin/python -m unittest examples/fashion-mnist/test_train_teacher.py
"""
import unittest

from distill_tools.fashion_mnist import train_teacher


class Progress(unittest.TestCase):
    def test_the_line_gives_the_share_the_rate_and_the_time_left(self):
        # 12,800 images in 31.2 s: 410 images/s; 47,200 left take 115 s
        line = train_teacher.progress_line(1, 8, 12_800, 60_000, 31.2)
        self.assertEqual(line, "epoch 1/8: 12,800/60,000 images (21%), 410 images/s, 1 min 55 s left")

    def test_under_a_minute_left_and_no_time_yet(self):
        self.assertEqual(train_teacher.progress_line(8, 8, 54_000, 60_000, 60.0),
                         "epoch 8/8: 54,000/60,000 images (90%), 900 images/s, 7 s left")
        self.assertEqual(train_teacher.progress_line(1, 8, 128, 60_000, 0.0),
                         "epoch 1/8: 128/60,000 images (0%), 0 images/s, 0 s left")


if __name__ == "__main__":
    unittest.main()
