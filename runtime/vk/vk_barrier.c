#include "runtime/vk/vk_barrier.h"

static void barrier(VkCommandBuffer cb, VkPipelineStageFlags src_stage, VkAccessFlags src_access,
                    VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = src_access, .dstAccessMask = dst_access};
    vkCmdPipelineBarrier(cb, src_stage, dst_stage, 0, 1, &mb, 0, NULL, 0, NULL);
}

#define CS VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
#define XF VK_PIPELINE_STAGE_TRANSFER_BIT
#define SW VK_ACCESS_SHADER_WRITE_BIT
#define SRW (VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT)
#define TW VK_ACCESS_TRANSFER_WRITE_BIT
#define TRW (VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT)

void cvk_barrier_compute_to_compute(VkCommandBuffer cb) { barrier(cb, CS, SW, CS, SRW); }
void cvk_barrier_transfer_to_compute(VkCommandBuffer cb) { barrier(cb, XF, TW, CS, SRW); }
void cvk_barrier_compute_to_transfer(VkCommandBuffer cb) { barrier(cb, CS, SW, XF, TRW); }
void cvk_barrier_transfer_to_transfer(VkCommandBuffer cb) { barrier(cb, XF, TW, XF, TRW); }
void cvk_barrier_compute_to_indirect(VkCommandBuffer cb) {
    barrier(cb, CS, SW, VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT, VK_ACCESS_INDIRECT_COMMAND_READ_BIT);
}
void cvk_barrier_device_to_host(VkCommandBuffer cb) {
    barrier(cb, CS | XF, SW | TW, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
}
void cvk_barrier_transfer_to_host(VkCommandBuffer cb) {
    barrier(cb, XF, TW, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
}
