#!/usr/bin/env python3
"""Write one valid seed per fuzz target into corpus/<target>/seed-* (layouts from
docs/format.md and the decoders' module docs). Targets whose input is sealed by the
target itself (label_config, uberblock) get their inner bytes. Run from fuzz/."""
import json, os, struct

def put(name, data):
    d = os.path.join("corpus", name.split("/")[0])
    os.makedirs(d, exist_ok=True)
    with open(os.path.join("corpus", name), "wb") as f:
        f.write(data)

def blkptr(otype, level=0, lsize=4096, alg=1, comp=0, birth=5, off=1 << 20):
    b = bytearray(128)
    struct.pack_into("<IIQ", b, 0, 0, (lsize + 511) // 512, off)
    struct.pack_into("<IIBBBB", b, 48, lsize, lsize, otype, level, alg, comp)
    struct.pack_into("<QQ", b, 64, birth, 1)
    b[80:112] = bytes(range(32))
    return bytes(b)

put("blkptr/seed-data", blkptr(4, alg=2))
put("blkptr/seed-indirect", blkptr(3, level=2, lsize=1 << 17))

def dnode(otype=4, nlevels=1, bp=None):
    b = bytearray(512)
    b[0], b[1], b[2], b[3], b[4] = otype, 17, nlevels, 1, 1
    struct.pack_into("<HHH", b, 8, 8, 16, 256)
    struct.pack_into("<QQ", b, 16, 0, 4096)
    b[64:192] = bp or blkptr(4)
    b[192:208] = b"bonus-bytes-here"
    return bytes(b)

put("dnode/seed-file", dnode())
os_root = bytearray(2048)
os_root[0:512] = dnode(otype=1, nlevels=2, bp=blkptr(3, level=1, lsize=1 << 17))
struct.pack_into("<Q", os_root, 512, 2)
put("dnode/seed-objset", bytes(os_root))

cfg = {"version": 3, "name": "tank", "pool_guid": 1, "guid": 11, "top_guid": 10, "txg": 4,
       "state": "active", "hostname": "h", "features_for_read": [],
       "vdev_tree": {"kind": "root", "id": 0, "guid": 1, "nparity": 0, "ashift": 0, "asize_bytes": 0,
                     "children": [{"kind": "raidz", "id": 0, "guid": 10, "nparity": 1, "ashift": 12,
                                   "asize_bytes": 1 << 30, "children": [
                                       {"kind": "file", "id": i, "guid": 11 + i, "path": f"/v/{i}", "nparity": 0,
                                        "ashift": 12, "asize_bytes": 0} for i in range(3)]}]}}
put("label_config/seed-raidz", json.dumps(cfg).encode())

ub = bytearray(4064)
ub[0:8] = b"tarnuber"
struct.pack_into("<QQQQ", ub, 8, 3, 9, 1234, 99)
ub[48:176] = blkptr(2, birth=9)
ub[176:304] = blkptr(20, birth=9)
put("uberblock/seed-ub", bytes(ub))

# ZAP: first byte picks 512-byte blocks; header block, then one leaf with 2 entries.
hdr = bytearray(512)
hdr[0:8] = b"TARNZAPH"
struct.pack_into("<IIQQQQQQ", hdr, 8, 512, 0, 2, 0x1234, 2, 0, 0, 1)
struct.pack_into("<Q", hdr, 256, 1)
leaf = bytearray(512)
leaf[0:8] = b"TARNZAPL"
ents = b""
for h, name, v in [(0x100, b"alpha", 5), (0x200000, b"name", 6)]:
    ents += struct.pack("<QQHH", h, v, 0, len(name)) + name
struct.pack_into("<QIII", leaf, 8, 0, 0, 2, len(ents))
leaf[32:32 + len(ents)] = ents
put("zap/seed-two-entries", b"\x00" + bytes(hdr) + bytes(leaf))

def sm_hdr(magic, *fields):
    return magic + struct.pack("<Q", 1) + b"".join(struct.pack("<Q", f) for f in fields)

hole = bytes(128)
root = sm_hdr(b"TARNMSRT", 9, 1, 3) + hole + struct.pack("<QQQQ", 0, 1 << 30, 24, 64) + hole * 16
put("space_map/seed-root", root)
page = sm_hdr(b"TARNMSPG", 0, 0, 0, 1) + struct.pack("<Q", 7) + hole
put("space_map/seed-page", page)
mp = sm_hdr(b"TARNMSMP", 0, 0, 0, 1 << 24, 7, 0, 2, 1) + hole
mp += struct.pack("<QQQQ", 0, 4096, 8192, 4096) + struct.pack("<QQQ", 6, 1 << 20, 4096)
put("space_map/seed-map", mp)
log = sm_hdr(b"TARNSMLG", 9, 1) + hole + struct.pack("<QQQQ", 4096, 8192, 0 | 1 << 32, 9)
put("space_map/seed-log", log)

put("send_record/seed-free", struct.pack("<H", 4) + struct.pack("<QQQ", 5, 0, 4096))
put("zil/seed-header", bytes(192))

# pool_records: a property list, a bookmark list, an all-zero dataset record.
props = {"compression": "lz4", "org.tarn:note": "x"}
b = struct.pack("<I", len(props))
for k, v in sorted(props.items()):
    b += struct.pack("<H", len(k)) + k.encode() + struct.pack("<H", len(v)) + v.encode()
put("pool_records/seed-props", b)
name = b"tank/fs#b"
put("pool_records/seed-bookmarks", struct.pack("<IH", 1, len(name)) + name + struct.pack("<QQQ", 7, 9, 1700000000))
put("pool_records/seed-dataset", bytes(256))

# image: all optional steps; one xor directive on the first metadata block; then a
# pointer copy in the fifth and an extreme value in the tenth.
put("image/seed-xor", bytes([31, 0, 0, 0x40, 0, 0x10, 0, 0, 0]))
put("image/seed-mixed", bytes([31, 4, 4, 1, 0, 0x80, 0, 0, 0, 9, 1, 2, 0, 0x48, 0, 0, 0]))

# decompress: algorithm 0 (off) with a 512-byte logical size.
put("decompress/seed-off", bytes([0, 0, 0]) + bytes(range(256)) * 2)

# znode: a regular file, mode 0644, one link, 4096 bytes, parent 34 (layout in
# crates/zpl/src/znode.rs `offset`; times at 64/80/96/112 as sec i64 + nsec u32).
z = bytearray(128)
z[0:4] = b"ZNOD"
struct.pack_into("<IIIQQQQ", z, 4, 0o100644, 1000, 1000, 1, 4096, 34, 1)
for at in (64, 80, 96, 112):
    struct.pack_into("<qI", z, at, 1700000000, 5)
put("znode/seed-file", bytes(z))

# L2ARC (docs/format.md section 16): the target seals its input with BLAKE3 itself,
# so the seeds are the bytes before the checksum.
put("l2arc/seed-header", b"TARNL2DH" + struct.pack("<II6Q", 1, 0, 7, 9, 3, 8192, 4096, 16384))
entry = struct.pack("<IQQQQIQB", 0, 8192, 1 << 20, 5, 4096, 8192, 0x1234, 0)
put("l2arc/seed-logblock", b"TARNL2LB" + struct.pack("<II7Q", 1, 1, 7, 9, 3, 4096, 16384, 0, 0) + entry)
