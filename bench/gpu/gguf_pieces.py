#!/usr/bin/env python3
"""Moves a GGUF model to a GPU machine whose upload limit (64 MiB) is below the model's size.

  split MODEL DIR [--head-bytes N]  DIR/model.head = the file's first N bytes (header, embedding,
                                    the first layers), DIR/model.rest = the remaining bytes,
                                    DIR/model.tail = the non-layer tensors that lie in the rest
                                    (output_norm), DIR/manifest.json = sizes and sha256.
  trim DIR OUT                      a valid GGUF of the layers the head holds whole (block_count
                                    rewritten), from model.head + model.tail: real weights, real
                                    tokenizer, fewer layers. Needs no model.rest.
  join DIR REST OUT                 model.head + REST, checked against the manifest's sha256.
  cycle IN OUT --layers N           an N-layer GGUF whose layer l is IN's layer l % K (K = IN's
                                    layers): the full model's shapes and types from a trimmed
                                    file, for speed measurements only.
Plain Python 3 (struct, hashlib, json): no packages needed.
"""
import argparse
import hashlib
import json
import os
import re
import struct
import sys

GGML_BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 8: (32, 34), 12: (256, 144),
              14: (256, 210), 30: (1, 2)}
SCALAR = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}


class Reader:
    def __init__(self, buf):
        self.b, self.o = buf, 0

    def take(self, fmt):
        v = struct.unpack_from('<' + fmt, self.b, self.o)
        self.o += struct.calcsize('<' + fmt)
        return v[0]

    def string(self):
        n = self.take('Q')
        s = bytes(self.b[self.o:self.o + n]).decode('utf-8', 'replace')
        self.o += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take('I'), self.take('Q')
            return [self.value(et) for _ in range(n)]
        return self.take(SCALAR[t])


def parse(buf):
    """Header of a GGUF v2/v3 file: (kv bytes, kv dict, value offsets, tensors, data start)."""
    r = Reader(buf)
    if bytes(buf[:4]) != b'GGUF':
        sys.exit('not a GGUF file')
    r.o = 4
    version, n_t, n_kv = r.take('I'), r.take('Q'), r.take('Q')
    kv_start = r.o
    kv, where = {}, {}
    for _ in range(n_kv):
        k = r.string()
        t = r.take('I')
        where[k] = (r.o, t)
        kv[k] = r.value(t)
    kv_bytes = bytes(buf[kv_start:r.o])
    tensors = []
    for _ in range(n_t):
        name = r.string()
        nd = r.take('I')
        dims = [r.take('Q') for _ in range(nd)]
        typ, off = r.take('I'), r.take('Q')
        bs, ts = GGML_BLOCK[typ]
        n = 1
        for d in dims:
            n *= d
        tensors.append({'name': name, 'dims': dims, 'type': typ, 'offset': off, 'size': n // bs * ts})
    align = kv.get('general.alignment', 32)
    data = (r.o + align - 1) // align * align
    return {'version': version, 'kv_start': kv_start, 'kv_bytes': kv_bytes, 'kv': kv, 'where': where,
            'tensors': tensors, 'data': data, 'align': align}


def write(path, h, tensors, block_count):
    """tensors: [(info, bytes)] in order; writes a GGUF with block_count patched."""
    kvb = bytearray(h['kv_bytes'])
    arch = h['kv']['general.architecture']
    off, typ = h['where'][arch + '.block_count']
    rel = off - h['kv_start']
    kvb[rel:rel + struct.calcsize(SCALAR[typ])] = struct.pack('<' + SCALAR[typ], block_count)
    out = bytearray(b'GGUF' + struct.pack('<IQQ', h['version'], len(tensors), len(h['kv'])))
    out += kvb
    align, offset, offs = h['align'], 0, []
    for info, data in tensors:
        offs.append(offset)
        offset = (offset + len(data) + align - 1) // align * align
    for (info, data), o in zip(tensors, offs):
        nb = info['name'].encode()
        out += struct.pack('<Q', len(nb)) + nb + struct.pack('<I', len(info['dims']))
        out += b''.join(struct.pack('<Q', d) for d in info['dims'])
        out += struct.pack('<IQ', info['type'], o)
    out += b'\0' * ((-len(out)) % align)
    with open(path, 'wb') as f:
        f.write(out)
        for (info, data), o in zip(tensors, offs):
            f.write(data)
            f.write(b'\0' * ((-len(data)) % align))


def layer_of(name):
    m = re.match(r'blk\.(\d+)\.', name)
    return int(m.group(1)) if m else None


def sha256(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            h.update(chunk)
    return h.hexdigest()


def cmd_split(a):
    with open(a.model, 'rb') as f:
        buf = f.read()
    h = parse(buf)
    n = min(a.head_bytes, len(buf))
    os.makedirs(a.dir, exist_ok=True)
    tail = [t for t in h['tensors'] if layer_of(t['name']) is None and h['data'] + t['offset'] + t['size'] > n]
    tail_from = min((h['data'] + t['offset'] for t in tail), default=len(buf))
    with open(os.path.join(a.dir, 'model.head'), 'wb') as f:
        f.write(buf[:n])
    with open(os.path.join(a.dir, 'model.rest'), 'wb') as f:
        f.write(buf[n:])
    with open(os.path.join(a.dir, 'model.tail'), 'wb') as f:
        f.write(buf[tail_from:])
    man = {'name': os.path.basename(a.model), 'size': len(buf), 'sha256': hashlib.sha256(buf).hexdigest(),
           'head_bytes': n, 'tail_offset': tail_from}
    with open(os.path.join(a.dir, 'manifest.json'), 'w') as f:
        json.dump(man, f, indent=1)
    print(json.dumps(man))


def cmd_trim(a):
    man = json.load(open(os.path.join(a.dir, 'manifest.json')))
    head = open(os.path.join(a.dir, 'model.head'), 'rb').read()
    tail = open(os.path.join(a.dir, 'model.tail'), 'rb').read()
    h = parse(head)
    def data_of(t):
        s = h['data'] + t['offset']
        if s + t['size'] <= len(head):
            return head[s:s + t['size']]
        if s >= man['tail_offset']:
            return tail[s - man['tail_offset']:s - man['tail_offset'] + t['size']]
        return None
    layers = {}
    for t in h['tensors']:
        l = layer_of(t['name'])
        if l is not None:
            layers.setdefault(l, []).append(t)
    # The layers whose tensors the head holds whole (files order layers by name, so these need
    # not be 0..k-1), renumbered 0..k-1 in their original order.
    whole = sorted(l for l, ts in layers.items() if all(data_of(t) is not None for t in ts))
    renum = {l: i for i, l in enumerate(whole)}
    keep = []
    for t in h['tensors']:
        l = layer_of(t['name'])
        if l is not None and l not in renum:
            continue
        d = data_of(t)
        if d is None:
            sys.exit('tensor %s is in neither the head nor the tail' % t['name'])
        if l is not None:
            t = dict(t)
            t['name'] = re.sub(r'^blk\.\d+\.', 'blk.%d.' % renum[l], t['name'])
        keep.append((t, d))
    k = len(whole)
    write(a.out, h, keep, k)
    print('trimmed to %d layers (original %s): %s (%d bytes)' % (k, whole, a.out, os.path.getsize(a.out)))


def cmd_join(a):
    man = json.load(open(os.path.join(a.dir, 'manifest.json')))
    with open(a.out, 'wb') as f:
        for p in (os.path.join(a.dir, 'model.head'), a.rest):
            with open(p, 'rb') as g:
                f.write(g.read())
    got = sha256(a.out)
    if got != man['sha256']:
        os.remove(a.out)
        sys.exit('join: sha256 %s does not match %s' % (got, man['sha256']))
    print('joined %s (%d bytes, sha256 ok)' % (a.out, os.path.getsize(a.out)))


def cmd_cycle(a):
    buf = open(a.input, 'rb').read()
    h = parse(buf)
    arch = h['kv']['general.architecture']
    k = h['kv'][arch + '.block_count']
    by_layer = {}
    other = []
    for t in h['tensors']:
        l = layer_of(t['name'])
        d = buf[h['data'] + t['offset']:h['data'] + t['offset'] + t['size']]
        (by_layer.setdefault(l, []) if l is not None else other).append((t, d))
    out = [x for x in other if not x[0]['name'].startswith('output')]
    for l in range(a.layers):
        for t, d in by_layer[l % k]:
            nt = dict(t)
            nt['name'] = re.sub(r'^blk\.\d+\.', 'blk.%d.' % l, t['name'])
            out.append((nt, d))
    out += [x for x in other if x[0]['name'].startswith('output')]
    write(a.out, h, out, a.layers)
    print('cycled %d layers into %d: %s (%d bytes)' % (k, a.layers, a.out, os.path.getsize(a.out)))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest='cmd', required=True)
    s = sub.add_parser('split'); s.add_argument('model'); s.add_argument('dir')
    s.add_argument('--head-bytes', type=int, default=54_000_000); s.set_defaults(fn=cmd_split)
    s = sub.add_parser('trim'); s.add_argument('dir'); s.add_argument('out'); s.set_defaults(fn=cmd_trim)
    s = sub.add_parser('join'); s.add_argument('dir'); s.add_argument('rest'); s.add_argument('out')
    s.set_defaults(fn=cmd_join)
    s = sub.add_parser('cycle'); s.add_argument('input'); s.add_argument('out')
    s.add_argument('--layers', type=int, required=True); s.set_defaults(fn=cmd_cycle)
    a = p.parse_args()
    a.fn(a)


if __name__ == '__main__':
    main()
