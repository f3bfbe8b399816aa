"""Writes the meta.pkl fixtures the trainer's pickle reader is tested against, the way nanoGPT's
data/shakespeare_char/prepare.py writes its meta.pkl (pickle.dump of {'vocab_size', 'itos',
'stoi'}). Run with any Python 3: python3 make_meta.py (committed output: Python 3.11.7)."""
import pickle

def meta(chars):
    return {'vocab_size': len(chars), 'itos': {i: ch for i, ch in enumerate(chars)},
            'stoi': {ch: i for i, ch in enumerate(chars)}}

# The characters of a short text, sorted, as prepare.py takes them (one of them not ASCII).
small = sorted(set("First Citizen:\nBefore we proceed any further, hear me speak.\nAll: Speak, speak. é"))
with open('meta_small.pkl', 'wb') as f:
    pickle.dump(meta(small), f)  # the default protocol (4 since Python 3.8)
# 1,500 characters (U+4E00 on): ids past 255 and memo indices past 255, and pickle's batches
# of 1,000 dict items.
large = [chr(0x4E00 + i) for i in range(1500)]
with open('meta_large.pkl', 'wb') as f:
    pickle.dump(meta(large), f)
# Protocol 2, as Python 2 era scripts wrote it (BINPUT, BINUNICODE, no frames).
with open('meta_protocol2.pkl', 'wb') as f:
    pickle.dump(meta(small), f, protocol=2)
