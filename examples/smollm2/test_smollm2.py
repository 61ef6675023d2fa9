"""Tests of llama.py, kjv.py, prepare_lm.py and make_teacher.py's q/k row order (seconds; no GGUF
file needed, the KJV only for the test marked so):

    .venv/bin/python -m unittest examples/smollm2/test_smollm2.py
"""
import os
import subprocess
import unittest

import numpy as np
import torch

from distill_tools.smollm2 import kjv
from distill_tools.smollm2.llama import Llama, LlamaConfig, check_dynamic, rotate_half, scripted, traced
from distill_tools.smollm2.make_teacher import unpermute
from distill_tools.smollm2.prepare_lm import held_out, passages, split

SMALL = LlamaConfig(vocab=50, d_model=32, layers=2, heads=4, kv_heads=2, mlp_width=48, rms_eps=1e-5, rope_theta=10000.0)


def model(c: LlamaConfig = SMALL, seed: int = 0) -> Llama:
    torch.manual_seed(seed)
    m = Llama(c).eval()
    with torch.no_grad():
        m.embed_tokens.weight.normal_(0, 0.3)
    return m


class LlamaTest(unittest.TestCase):
    def test_parameter_names_are_hugging_face_llama_without_a_head(self):
        names = [n for n, _ in model().named_parameters()]
        layer = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
        want = ["embed_tokens.weight"] + [f"layers.{i}.{p}.weight" for i in range(2) for p in layer] + ["norm.weight"]
        self.assertEqual(names, want)
        self.assertEqual(list(scripted(model()).named_buffers()), [])

    def test_traced_and_scripted_modules_run_at_other_shapes(self):
        m = model()
        self.assertLessEqual(check_dynamic(m, traced(m), SMALL.vocab), 1e-5)
        self.assertLessEqual(check_dynamic(m, scripted(m), SMALL.vocab), 1e-5)

    def test_right_padding_and_later_tokens_do_not_change_earlier_logits(self):
        m = model()
        ids = torch.randint(0, SMALL.vocab, (2, 9), generator=torch.Generator().manual_seed(0))
        mask = torch.ones_like(ids)
        mask[1, 5:] = 0
        with torch.no_grad():
            both = m(ids, mask)
            alone = m(ids[1:, :5], mask[1:, :5])
            changed = ids.clone()
            changed[0, 6] = (changed[0, 6] + 1) % SMALL.vocab
            after = m(changed, mask)
        self.assertLess(float((both[1, :5] - alone[0]).abs().max()), 1e-5)
        self.assertEqual(float((both[0, :6] - after[0, :6]).abs().max()), 0.0)
        self.assertGreater(float((both[0, 6] - after[0, 6]).abs().max()), 1e-3)
        self.assertTrue(bool(m(ids, torch.zeros_like(ids)).isfinite().all()))  # all padding: finite

    def test_a_bfloat16_copy_computes_in_bfloat16_close_to_float32(self):
        m = model()
        ids = torch.randint(0, SMALL.vocab, (2, 6), generator=torch.Generator().manual_seed(2))
        mask = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]])
        with torch.no_grad():
            want = m(ids, mask)
            half = scripted(model()).to(torch.bfloat16)
            got = half(ids, mask)
        self.assertEqual(got.dtype, torch.bfloat16)
        self.assertLess(float((got.float() - want).abs().max()), 0.25)

    def test_grouped_query_heads_read_kv_head_j_over_groups(self):
        grouped = model()
        full = Llama(LlamaConfig(**{**SMALL.to_dict(), "kv_heads": SMALL.heads})).eval()
        state = grouped.state_dict()
        d = SMALL.d_head
        for name in list(state):
            if name.endswith(("k_proj.weight", "v_proj.weight")):  # kv head j -> query heads 2j, 2j + 1
                state[name] = state[name].view(SMALL.kv_heads, d, -1).repeat_interleave(2, 0).reshape(-1, SMALL.d_model)
        full.load_state_dict(state)
        ids = torch.randint(0, SMALL.vocab, (1, 7), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            diff = (grouped(ids, torch.ones_like(ids)) - full(ids, torch.ones_like(ids))).abs().max()
        self.assertLess(float(diff), 1e-5)


class RowOrderTest(unittest.TestCase):
    def test_unpermute_undoes_llama_cpp_and_turns_its_pairs_into_rotate_half(self):
        heads, d, cols = 3, 8, 5
        hf = np.random.default_rng(0).standard_normal((heads * d, cols)).astype(np.float32)
        # llama.cpp's convert_hf_to_gguf permutes the rows so each rotary pair is adjacent.
        ggml = hf.reshape(heads, 2, d // 2, cols).swapaxes(1, 2).reshape(heads * d, cols)
        np.testing.assert_array_equal(unpermute(ggml, heads), hf)
        # Rotating adjacent pairs (2i, 2i + 1) of llama.cpp's rows == rotate_half on Hugging Face's.
        x = torch.randn(cols)
        angle = 0.7 * torch.tensor(10000.0) ** (-torch.arange(0, d, 2).float() / d)
        q_hf = (torch.from_numpy(hf) @ x).view(heads, d)
        cos, sin = torch.cat((angle, angle)).cos(), torch.cat((angle, angle)).sin()
        rot_hf = q_hf * cos + rotate_half(q_hf) * sin
        q_gg = (torch.from_numpy(ggml) @ x).view(heads, d // 2, 2)
        a, b = q_gg[..., 0], q_gg[..., 1]
        rot_gg = torch.stack((a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()), -1)
        back = unpermute(rot_gg.reshape(heads * d, 1).numpy(), heads)
        np.testing.assert_allclose(back.reshape(heads, d), rot_hf.numpy(), atol=1e-6)


def pack(codes, n_bits=9) -> bytes:
    value = sum(c << (i * n_bits) for i, c in enumerate(codes))
    return value.to_bytes((len(codes) * n_bits + 7) // 8, "little")


class KjvTest(unittest.TestCase):
    def test_unlzw_decodes_a_stream_with_a_code_defined_by_itself(self):
        # "ABABABA": A, B, 257 (AB), then 259 (ABA), the entry being defined by this very code.
        self.assertEqual(kjv.unlzw(pack([65, 66, 257, 259])), b"ABABABA")

    @unittest.skipUnless(os.path.isfile(kjv.KJV_PATH), "Debian's bible-kjv-text is not installed")
    def test_reader_agrees_with_gzip_and_counts_every_verse(self):
        with open(kjv.KJV_PATH, "rb") as f:
            data = f.read()
        start, end = int.from_bytes(data[0x5C:0x60], "big"), int.from_bytes(data[0x60:0x64], "big")
        ref = subprocess.run(["gzip", "-dc"], input=b"\x1f\x9d\x90" + data[start:end], capture_output=True, check=True)
        self.assertEqual(kjv.unlzw(data[start:end]), ref.stdout)
        verses = kjv.read_verses()
        self.assertEqual(len(verses), 31102)
        self.assertEqual((verses[-1].book, verses[-1].chapter, verses[-1].verse), ("Rev", 22, 21))


class SplitTest(unittest.TestCase):
    def test_passages_stay_in_a_chapter_and_held_out_verses_never_train(self):
        v = kjv.Verse
        verses = [v("Ge", 1, 1, "a b c"), v("Ge", 1, 2, "d e"), v("Ge", 2, 1, "f g h i"), v("Ge", 2, 2, "j"),
                  v("Ge", 2, 3, "k l"), v("Ruth", 1, 1, "m n o"), v("Ruth", 1, 2, "p")]
        self.assertEqual(passages(verses[2:5], 5), ["f g h i j", "k l"])
        self.assertEqual(passages(verses[:3], 0), ["a b c", "d e", "f g h i"])
        self.assertEqual(passages(verses[:3], 100), ["a b c d e", "f g h i"])
        train, test = split(verses, 3, seed=0)
        self.assertEqual(test, ["a b c", "d e", "m n o", "p"])  # Genesis 1 and Ruth, in order
        self.assertEqual(sorted(train), ["f g h i", "j k l"])
        self.assertEqual([held_out(x) for x in verses], [True, True, False, False, False, True, True])


if __name__ == "__main__":
    unittest.main()
