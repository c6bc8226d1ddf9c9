#include "tools/reply_json.h"

void reply_json_disk(json_t *j, const engine_reply *r) {
    json_object_set_new(j, "disk_tokens", json_integer(r->disk_tokens));
    json_object_set_new(j, "disk_chunks_read", json_integer(r->disk_chunks_read));
    json_object_set_new(j, "disk_chunks_written", json_integer(r->disk_chunks_written));
    json_object_set_new(j, "disk_bytes_read", json_integer((json_int_t)r->disk_bytes_read));
    json_object_set_new(j, "disk_bytes_written", json_integer((json_int_t)r->disk_bytes_written));
    json_object_set_new(j, "disk_rejected", json_integer(r->disk_rejected));
    json_object_set_new(j, "disk_evicted_chunks", json_integer(r->disk_evicted_chunks));
    json_object_set_new(j, "disk_evicted_bytes", json_integer((json_int_t)r->disk_evicted_bytes));
    json_object_set_new(j, "disk_over_budget", json_integer(r->disk_over_budget));
    json_object_set_new(j, "disk_read_ms", json_real(r->disk_read_ms));
    json_object_set_new(j, "disk_write_ms", json_real(r->disk_write_ms));
}

const char *reply_finish_name(const engine_reply *r) {
    switch (r->finish) {
    case ENGINE_STOP: return "stop";
    case ENGINE_LENGTH: return "length";
    case ENGINE_CANCELLED: return "cancelled";
    default: return "error";
    }
}
