#include "tests/vk_fixture.h"

#include <stdio.h>
#include <stdlib.h>

#include "runtime/base/error.h"
#include "runtime/vk/vk_instance.h"

cvk_ctx *vk;

int vk_setup(void **state) {
    (void)state;
    vk = calloc(1, sizeof *vk);
    if (!vk || cvk_ctx_init(vk, NULL)) {
        fprintf(stderr, "no Vulkan device: %s\n", cd_errmsg());
        return -1;
    }
    return 0;
}

int vk_teardown(void **state) {
    (void)state;
    cvk_ctx_free(vk);
    free(vk);
    vk = NULL;
    if (cvk_validation_errors()) {
        fprintf(stderr, "%llu Vulkan validation messages\n", (unsigned long long)cvk_validation_errors());
        return -1;
    }
    return 0;
}
