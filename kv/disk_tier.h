/* The disk tier: cached prefixes as files under --cache-dir, so a restarted process serves a
 * known prefix (a system prompt, an old conversation) without recomputing it.
 *
 * Chunks. A prompt is cut into chunks of chunk_pages whole KV pages (chunk_tokens =
 * chunk_pages * page_tokens tokens; 16 pages = 256 tokens at page 16 by default). Chunk k is
 * keyed by a chain hash over the whole prefix up to its end (like vLLM's block hashes and
 * LMCache's chunks), so one file names one exact prefix:
 *
 *   tokens   [ chunk 0: t0 .. t255 ][ chunk 1: t256 .. t511 ][ chunk 2 ... ][ partial: not stored ]
 *   h_-1 = 32 zero bytes
 *   h_k  = SHA-256( field("domain", "cinder.kv-chunk.v1") || field("namespace", ns)
 *                   || field("prev", h_k-1) || field("tokens", tokens of chunk k as int32 LE) )
 *          (field = tag length, tag, value length, value: lengths as uint64 LE, as in
 *           kv_cache_namespace, so no two field lists encode alike)
 *   file     DIR/<namespace hex>/<h_k hex>.v2.kv    (the format version in the name: two builds of
 *            different formats may share DIR without replacing each other's files)
 *
 * File layout (all integers little-endian):
 *
 *   offset  bytes                          field
 *   0       8                              magic "CINDERKV"
 *   8       4                              format version (2)
 *   12      4                              header bytes (KV_DISK_HEADER_BYTES = 176)
 *   16      32                             namespace (kv_cache_namespace: model, code id, dtype, page size, tenant)
 *   48      4 x 4                          n_layer, n_head_kv, head_dim, page_tokens
 *   64      4                              dtype (1 = f16)
 *   68      4                              chunk_pages
 *   72      8                              page_bytes
 *   80      4                              chunk index k
 *   84      4                              n_tokens (= chunk_pages * page_tokens)
 *   88      32                             h_k-1
 *   120     32                             h_k
 *   152     24                             zero (reserved)
 *   176     4 * n_tokens                   the chunk's tokens, int32
 *   ...     chunk_pages * page_bytes       the pages, in order, as laid out in the pool (kv_layout.h)
 *   end-32  32                             HMAC-SHA-256 of every byte before it, under DIR/key
 *
 * Trust. Everything in a chunk but the MAC can be computed by anyone who has the public model
 * file (format 1 ended in an XXH3 checksum, which is no defence): so chunks are authenticated
 * with HMAC-SHA-256 under a 32-byte secret key, DIR/key (mode 0600, created from the CSPRNG on
 * first use; two processes racing to create it end with one key: it is written to a temporary
 * name and hard-linked into place, the loser reads the winner's). A chunk whose MAC fails is
 * rejected like a corrupt one. DIR and DIR/<namespace hex> are created 0700; init refuses a
 * directory owned by another user or writable by group or others, and a key file that is not a
 * 32-byte regular file of ours that only we can read. Below DIR every file is opened relative to
 * the namespace directory's descriptor with O_NOFOLLOW (a symlink planted at a chunk or temp
 * name is never followed), only regular files are read (fstat after open; a FIFO is opened
 * O_NONBLOCK and skipped, never read), temp files get unique names and O_CREAT | O_EXCL, mode
 * 0600. What this does not protect against: anyone who can read DIR/key (the same user, root)
 * can forge chunks; the tokens of cached prompts are stored in clear (DIR is 0700 for that).
 *
 * Reading (kv_disk_read) checks every field before it uses it, so a hostile file can cause
 * neither an out-of-bounds read nor a large allocation: the header is read into a fixed buffer;
 * magic, version and header size; the namespace equal to ours (else "written for another model or
 * config"); the layout (n_layer .. page_bytes, chunk_pages, n_tokens) equal to ours; the chunk
 * index; only then is the expected size computed (from our own counts) and compared with the
 * file's size (shorter: "truncated"); the tokens and pages are read into buffers sized at init,
 * the MAC compared, then the tokens against the prompt's chunk and both chain hashes.
 * Any failure: one line on stderr naming the file and the problem, the file is removed (so a
 * good copy is written again by the next request that computes the chunk), `rejected` counts it,
 * and the caller recomputes those tokens. A rejected file is never served. A file that may be
 * fine but cannot be judged now (another format version, a read error such as EIO, not a
 * regular file, a symlink) is skipped instead: a line, counted in `rejected`, not removed; the
 * write-through of that chunk then replaces it (rename) rather than trusting its name.
 *
 * Data path. The payload goes through a host-visible staging buffer of chunk_pages page-sized
 * slots and the host tier's copy machinery (kv_copy_pages):
 *
 *   read:   file ──read()──► staging slots ──kv_copy_pages(RESTORE)──► fresh GPU pages
 *   write:  open name.<pid>.<n>.tmp (O_EXCL), fallocate ──► GPU pages ──kv_copy_pages(DEMOTE)──►
 *           staging slots ──write()──► fsync ──rename()──► name ──► fsync(dir)
 *
 * The temp file is opened and its space allocated before the GPU copy, so a full disk costs no
 * device copy. Writes are atomic (rename), so a reader sees a whole file or none; a crash leaves
 * at most a .tmp file, removed by a later init (ours by name, regular, and its process gone or
 * an hour old). Everything is synchronous (the request waits). Not thread-safe; two processes
 * may share a directory (each write is one rename; identical content either way).
 *
 * The budget (--cache-dir-max-mb; kv_disk_init's max_bytes, 0 = 10% of the file system's free
 * space at init, at least KV_DISK_MIN_DEFAULT_BYTES). The tier keeps an index of every chunk
 * file under DIR (all namespace directories, all format versions: one budget per DIR), each with
 * its size and its last use, in least-recently-used order:
 *
 *   oldest ◄──────────────────────────────────────────────────────────► newest
 *   [ns 2: b7..v2.kv][ns 0: 31..v1.kv][ns 0: 9a..v2.kv] ... [ns 0: 04..v2.kv]
 *     evicted first                                          just read or written
 *
 * built by a scan of DIR at init and again (at most once a second, KV_DISK_RESCAN_MS) before a
 * write, so chunks other processes wrote or used count too. Last use is the file's mtime, not its
 * atime (noatime and relatime make atime useless): the scan seeds the order from mtime, and a
 * read hit, a write, and a write-through that finds its chunk already there set the file's mtime
 * to now (futimens, best effort) and move it to the newest end, so another process's scan sees
 * the same order. A write that would take the index past the budget unlinks the oldest files
 * first until the new chunk fits (evicted_chunks, evicted_bytes); a file that is already gone
 * (another process removed it) just leaves the index. A write-through never evicts the chunks of
 * its own prefix (they were all used by the request, so they are the newest): when only those
 * are left, or when one chunk is larger than the whole budget, the chunk is not written
 * (over_budget; one line on stderr the first time) and the write-through stops there, since a
 * chunk is only ever read after all the chunks before it. With several processes the directory
 * can exceed the budget by what the others wrote since this process's last scan.
 *
 * Fault injection (a test build's only: CINDER_TESTS in CMakeLists.txt; off unless asked):
 * kv_disk_fault_set, or the environment variable CINDER_FAULT_DISK read by init, is a
 * comma-separated list of op:N[:kind], each making the Nth such operation (counted from that
 * moment) fail once:
 *   write:N[:eio|enospc|short]  the Nth chunk write fails in the middle of its first page (after
 *                               the header and tokens reached the temp file): write() returns EIO
 *                               (default) or ENOSPC, or writes only part (a short write) and the
 *                               next write() returns ENOSPC
 *   fsync:N                     the Nth chunk's fsync returns EIO
 *   read:N[:eio|short]          the Nth chunk read (of a regular file whose header is ours) fails
 *                               in the middle of its first page: read() returns EIO (default: the
 *                               file is skipped) or ends early, as a file truncated after its size
 *                               was checked (rejected and removed)
 *   rename:N                    the Nth rename of a written temp file into place returns EIO (the
 *                               temp file is removed; the chunk stays uncached on disk)
 *   dirsync:N                   the Nth fsync of the directory after such a rename returns EIO: the
 *                               name may not survive a crash, so the chunk is not trusted: the name
 *                               is removed (EINVAL, a file system that cannot sync directories, is
 *                               not a failure)
 *   unlink:N                    the Nth removal of a file for the budget returns EIO: the file
 *                               stays, counted in the index (moved to its newest end), and the
 *                               write that needed the room is not made (a line; write_errors)
 * The request is never harmed: the chunk is recomputed or stays uncached on disk.
 *
 *   kv_disk_tier d;
 *   kv_disk_init(&d, vk, &pool.buf, &pool.lay, ns, "/var/cache/cinder", 16, 0);   (kv_pool.h)
 *   uint8_t h[n_chunks][32]; kv_disk_chain(&d, ids, n_chunks, h);
 *   if (kv_disk_read(&d, ids + k * ct, k, prev, h[k]) == 1)      staged and validated
 *       kv_disk_upload(&d, first, gpu_pages, n);                 staged pages first.. -> gpu_pages
 *   kv_disk_store(&d, ids + k * ct, k, prev, h[k], seq_pages);   write-through (skips known chunks)
 *   kv_disk_free(&d);
 *
 * Errors: -1 with cd_errmsg() for failures of the machinery (a GPU copy, out of memory); file
 * problems are not errors (see above). Messages that reject a file or fail a write go to stderr
 * (the one place the kv layer prints: the request goes on, recomputing) and to last_msg. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "runtime/base/kv_layout.h"
#include "runtime/vk/vk_ctx.h"

#define KV_DISK_HASH_BYTES 32
#define KV_DISK_HEADER_BYTES 176u
#define KV_DISK_VERSION 2u
#define KV_DISK_KEY_BYTES 32
#define KV_DISK_MAC_BYTES 32
#define KV_DISK_CHUNK_TOKENS_DEFAULT 256u

#define KV_DISK_MIN_DEFAULT_BYTES (256ull << 20) /* the default budget's floor */
#define KV_DISK_RESCAN_MS 1000.0                 /* a write rescans DIR when the last scan is older */
#define KV_DISK_NONE UINT32_MAX

#include "kv/disk_index.h" /* the set and the budget's index, keyed on the above */

enum kv_disk_fault_op {
    KV_FAULT_WRITE,
    KV_FAULT_FSYNC,
    KV_FAULT_READ,
    KV_FAULT_RENAME,
    KV_FAULT_DIRSYNC,
    KV_FAULT_UNLINK
};
#ifdef CINDER_FAULT_INJECTION
enum kv_disk_fault_kind { KV_FAULT_EIO, KV_FAULT_ENOSPC, KV_FAULT_SHORT };
#define KV_DISK_MAX_FAULTS 8
typedef struct kv_disk_fault {
    uint8_t op, kind; /* enum kv_disk_fault_op, _kind */
    bool fired;
    uint32_t nth; /* the Nth operation of op fails */
} kv_disk_fault;
#endif

typedef struct kv_disk_tier {
    char *dir;                      /* DIR/<namespace hex>, created by init (for messages) */
    int dir_fd;                     /* that directory, opened O_NOFOLLOW; every file is opened
                                            relative to it (valid when dir != NULL) */
    uint8_t key[KV_DISK_KEY_BYTES]; /* DIR/key: the chunks' HMAC key */
    uint8_t ns[KV_DISK_HASH_BYTES];
    kv_layout lay; /* ours: a file must match it exactly */
    uint32_t chunk_pages, chunk_tokens;
    cvk_ctx *vk;
    const cvk_buffer *pool; /* the GPU page pool (not owned) */
    cvk_buffer stage;       /* chunk_pages slots of page_bytes, host-visible */
    uint8_t *host_stage;    /* without a device (vk NULL): the slots in host memory */
    cvk_cmd cmd;            /* the staging copies (compute queue, synchronous) */
    int32_t *tokens;        /* [chunk_tokens] the staged chunk's tokens */
    uint32_t *slot_ids;     /* [chunk_pages] 0, 1, 2, ...: the staging slots in order */
    int top_fd;             /* DIR (for the scan and the eviction of other namespaces) */
    kv_disk_index index;    /* the chunk files under DIR, LRU first (the budget) */
    uint64_t max_bytes;     /* the budget: the index's bytes stay at most this */
    uint64_t stamp;         /* use counter (kv_disk_file.stamp) */
    uint64_t keep_from;     /* a write never evicts a file used at stamp >= this (the
                                            write-through's own prefix); UINT64_MAX: none kept */
    double scan_ms;         /* cd_now_ms() of the last scan */
    bool said_over_budget;  /* the over-budget line was printed */
    kv_disk_set stale;      /* names holding a file skipped on read: replaced, not trusted */
    uint32_t tmp_seq;       /* the next temp file's number (name.<pid>.<n>.tmp) */
    /* statistics since init */
    uint64_t chunks_read, chunks_written, bytes_read, bytes_written;
    uint64_t rejected;                      /* files rejected (and removed) */
    uint64_t write_errors;                  /* chunks that could not be written (disk full, ...) */
    uint64_t downloads;                     /* GPU -> staging copies made for writes */
    uint64_t tmp_removed;                   /* stale temp files of dead processes removed by init */
    uint64_t evicted_chunks, evicted_bytes; /* files this process unlinked for the budget */
    uint64_t over_budget;                   /* chunks not written: the budget could not hold them */
    uint64_t scans;                         /* scans of DIR (init's included) */
    double ms_read, ms_write;               /* wall time: read + validate + upload, download + write */
    char last_msg[512];                     /* the last rejection or write failure */
    bool quiet;                             /* last_msg only, no line on stderr (the fuzz harness) */
#ifdef CINDER_FAULT_INJECTION               /* a test build's hooks (kv_disk_fault) */
    kv_disk_fault faults[KV_DISK_MAX_FAULTS];
    uint32_t n_faults;
    uint32_t n_ops[6];       /* operations of each kv_disk_fault_op since the faults were set */
    int io_fault;            /* the fault armed for the chunk being read or written:
                                            its enum kv_disk_fault_kind + 1, or 0 */
    uint64_t io_done, io_at; /* bytes of that chunk moved so far; where it fails */
#endif
} kv_disk_tier;

/* Creates dir (and DIR/<namespace hex>) 0700 if missing, refuses either when it is owned by
 * another user or writable by group or others ("--cache-dir: DIR ...: refusing to use it"),
 * loads or creates DIR/key, checks the directory is writable, removes stale temp files, scans
 * DIR's chunk files for the budget of max_bytes (0: 10% of the free space, at least
 * KV_DISK_MIN_DEFAULT_BYTES), arms CINDER_FAULT_DISK's faults (a test build); a staging buffer of chunk_pages
 * pages (0 = KV_DISK_CHUNK_TOKENS_DEFAULT tokens' worth, at least one page; at most 4096 pages
 * and 65536 tokens).
 * vk NULL (pool NULL): a tier without a device, for the fuzz harness and tools that only judge
 * files: the staging slots are host memory (kv_disk_stage_ptr); kv_disk_read reads and validates
 * as always, kv_disk_store writes the staging slots as they are, kv_disk_upload fails. */
int kv_disk_init(kv_disk_tier *d, cvk_ctx *vk, const cvk_buffer *pool, const kv_layout *lay,
                 const uint8_t ns[KV_DISK_HASH_BYTES], const char *dir, uint32_t chunk_pages, uint64_t max_bytes);
void kv_disk_free(kv_disk_tier *d); /* zeroed is fine */
/* Creates dir 0700 if missing, checks it as init does, and loads or creates DIR/key into key
 * (what init does first; tests race it across processes). 0, or -1 with cd_errmsg(). */
int kv_disk_key(const char *dir, uint8_t key[KV_DISK_KEY_BYTES]);

/* The chain hashes of the first n_chunks whole chunks of ids: out[k] = h_k. */
int kv_disk_chain(const kv_disk_tier *d, const int32_t *ids, uint32_t n_chunks, uint8_t (*out)[KV_DISK_HASH_BYTES]);
/* The file of chain hash h (into path, cap bytes). */
void kv_disk_path(const kv_disk_tier *d, const uint8_t h[KV_DISK_HASH_BYTES], char *path, size_t cap);

/* Reads chunk k (tokens = its chunk_tokens ids; prev = h_k-1, zeros for k = 0; h = h_k) into
 * the staging buffer and validates it. 1: staged, valid; 0: no such file, or rejected (message,
 * file removed, rejected++); -1: error. */
int kv_disk_read(kv_disk_tier *d, const int32_t *tokens, uint32_t k, const uint8_t prev[KV_DISK_HASH_BYTES],
                 const uint8_t h[KV_DISK_HASH_BYTES]);
/* Staging slot i (< chunk_pages, page_bytes bytes): what kv_disk_read staged; NULL past the end. */
void *kv_disk_stage_ptr(const kv_disk_tier *d, uint32_t i);
/* Copies staged pages first .. first + n into gpu_pages[0 .. n) (first + n <= chunk_pages); waits. */
int kv_disk_upload(kv_disk_tier *d, uint32_t first, const uint32_t *gpu_pages, uint32_t n);
/* Writes chunk k from its chunk_pages GPU pages unless it is known to be on disk. 1: written;
 * 0: already there, or the write failed (message, write_errors++); -1: error (the GPU copy). */
int kv_disk_store(kv_disk_tier *d, const int32_t *tokens, uint32_t k, const uint8_t prev[KV_DISK_HASH_BYTES],
                  const uint8_t h[KV_DISK_HASH_BYTES], const uint32_t *gpu_pages);
/* Write-through of a sequence: every whole chunk of ids[0 .. n_chunks * chunk_tokens) not yet on
 * disk, chunk k from gpu_pages[k * chunk_pages ..); h[0 .. n_chunks) = kv_disk_chain of ids. Stops
 * at the first failed write (its message said it; the rest would fail too). 0, or -1 on error. */
int kv_disk_store_chunks(kv_disk_tier *d, const int32_t *ids, uint32_t n_chunks, uint8_t (*h)[KV_DISK_HASH_BYTES],
                         const uint32_t *gpu_pages);
/* The bytes of one chunk file. */
uint64_t kv_disk_chunk_bytes(const kv_disk_tier *d);
/* Rescans DIR now: the index becomes the chunk files there, ordered by mtime (init does this;
 * a write does it when the last scan is KV_DISK_RESCAN_MS old). 0, or -1 (out of memory). */
int kv_disk_rescan(kv_disk_tier *d);
#ifdef CINDER_FAULT_INJECTION
/* Replaces the armed faults with spec (the grammar above; NULL or "" clears them) and restarts
 * the operation counts. 0, or -1 with cd_errmsg() for a spec it cannot read. */
int kv_disk_fault_set(kv_disk_tier *d, const char *spec);
#endif
