// A key's or value's pair of values and a query's score, shared by attention.comp and
// attention_tiled.comp: the tiled kernel's rows must be the token kernel's bits, so both compute
// them with the same expressions, written once here. Macros because the row lives in a storage
// buffer in one kernel and in shared memory in the other.

// vec2 Name(uint rb, uint i): values 2i and 2i + 1 of the K or V row whose first word is buf[rb]:
// f16 pairs, or (p.q8) Q8_0 blocks of 32 values, 9 words a block (the int8 values four to a
// word, then the scale as f32 bits), dequantized as the CPU's attention does: scale * int8.
#define DEFINE_KV_PAIR(Name, buf)                                                         \
  vec2 Name(uint rb, uint i) {                                                            \
    if (p.q8 == 0) return unpackHalf2x16(buf[rb + i]);                                    \
    const uint b = rb + 9 * (i / 16), j = 2 * (i % 16);                                   \
    const int word = int(buf[b + j / 4]);                                                 \
    const int sh = int(8 * (j % 4));                                                      \
    return uintBitsToFloat(buf[b + 8]) *                                                  \
           vec2(float(bitfieldExtract(word, sh, 8)), float(bitfieldExtract(word, sh + 8, 8))); \
  }

// float Name(uint qb, uint kb): the scaled score of the query at qry[qb] against the key row at
// kb (read with PairFn): a sequential sum over the head's pairs, then times p.scale.
#define DEFINE_KV_SCORE(Name, PairFn)                                   \
  float Name(uint qb, uint kb) {                                        \
    float dot = 0.0;                                                    \
    for (uint i = 0; i < p.head_dim / 2; ++i) {                         \
      const vec2 kv = PairFn(kb, i);                                    \
      dot += qry[qb + 2 * i] * kv.x + qry[qb + 2 * i + 1] * kv.y;       \
    }                                                                   \
    return dot * p.scale;                                               \
  }
