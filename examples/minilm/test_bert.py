"""bert.py's encoder returning its hidden states: the same embedding as the plain encoder, and
states that are the layers' outputs.

    .venv/bin/python -m unittest examples/minilm/test_bert.py
"""
import unittest

import torch

from distill_tools.minilm.bert import BertConfig, BertSentenceEncoder, BertWithHiddenStates, scripted


class HiddenStates(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        c = BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16)
        self.model = BertSentenceEncoder(c).eval()
        # two sentences, the second padded after 3 of its 5 positions
        self.ids = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]])
        self.mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])

    def test_the_embedding_is_the_plain_encoders_and_the_states_its_layers_outputs(self):
        hidden = scripted(BertWithHiddenStates(self.model))
        with torch.no_grad():
            want = self.model(self.ids, self.mask)
            got, states = hidden(self.ids, self.mask)
            h0 = self.model.embeddings(self.ids)
        self.assertEqual(torch.equal(got, want), True)
        self.assertEqual([list(h.shape) for h in states], [[2, 5, 8]] * 3)
        self.assertEqual(torch.equal(states[0], h0), True)
        # the mean of the last state over the real tokens, normalised, is the embedding
        last = states[2][1, :3].mean(0)
        torch.testing.assert_close(last / last.norm(), want[1], rtol=0, atol=1e-6)
        # the same parameter names as the plain encoder (Hugging Face's): one file serves both
        self.assertEqual(sorted(dict(hidden.named_parameters())), sorted(dict(self.model.named_parameters())))


if __name__ == "__main__":
    unittest.main()
