#include "kv/kv_pool.h"

#include <stdio.h>
#include <string.h>

#include "runtime/base/error.h"

int kv_pool_init(kv_pool *p, cvk_ctx *vk, const kv_layout *lay, uint32_t n_tokens) {
    *p = (kv_pool){.vk = vk, .lay = *lay};
    uint32_t pt = lay->page_tokens, n_pages = (uint32_t)(((uint64_t)n_tokens + pt - 1) / pt);
    if (!n_pages) return cd_fail("kv pool: no pages (%u tokens)", n_tokens);
    if (kv_pages_init(&p->pages, n_pages, pt) ||
        cvk_buffer_create(&vk->mem, &p->buf, (uint64_t)n_pages * lay->page_bytes, lay->page_bytes, CVK_MEM_DEVICE) ||
        cvk_cmd_init(&p->copy, &vk->dev, false)) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", cd_errmsg());
        kv_pool_free(p);
        return cd_fail("kv pool of %u pages (%u tokens each): %s", n_pages, pt, msg);
    }
    return 0;
}

void kv_pool_free(kv_pool *p) {
    if (p->vk) {
        cvk_cmd_free(&p->copy);
        cvk_buffer_destroy(&p->vk->mem, &p->buf);
    }
    kv_pages_free(&p->pages);
    memset(p, 0, sizeof *p);
}

uint32_t kv_pool_pages_needed(const kv_pool *p, const kv_seq *s, uint32_t n) {
    uint32_t need = kv_pages_for(&p->pages, s->n_tokens + n) - s->n_pages;
    if (s->n_tokens % p->lay.page_tokens && kv_page_refs(&p->pages, s->pages[s->n_pages - 1]) > 1) need++;
    return need;
}

int kv_pool_extend(kv_pool *p, kv_seq *s, uint32_t n) {
    uint32_t need = kv_pool_pages_needed(p, s, n), have = kv_pages_free_count(&p->pages);
    if (need > have)
        return cd_fail("KV pool exhausted: %u more pages needed, %u of %u free (%u tokens per page)", need, have,
                       p->pages.n_pages, p->lay.page_tokens);
    kv_cow cow;
    if (kv_seq_append(&p->pages, s, n, &cow)) return -1;
    if (cow.n_tokens && kv_pool_copy_page(p, cow.src, cow.dst)) { /* undo: s as it was */
        kv_seq_truncate(&p->pages, s, s->n_tokens - n);
        kv_page_retain(&p->pages, cow.src); /* alive: it was shared, its other holders keep it */
        kv_page_release(&p->pages, s->pages[s->n_pages - 1]);
        s->pages[s->n_pages - 1] = cow.src;
        return -1;
    }
    return 0;
}

int kv_pool_copy_page(kv_pool *p, uint32_t src, uint32_t dst) {
    uint64_t pb = p->lay.page_bytes;
    if (src >= p->pages.n_pages || dst >= p->pages.n_pages || src == dst)
        return cd_fail("kv page copy %u -> %u: not two pages of the %u in the pool", src, dst, p->pages.n_pages);
    if (cvk_cmd_begin(&p->copy) ||
        cvk_cmd_copy(&p->copy, cvk_view_range(&p->buf, src * pb, pb), cvk_view_range(&p->buf, dst * pb, pb)))
        return -1;
    return cvk_cmd_run(&p->copy);
}
