/* Every pipeline barrier cinder records, named for what it orders. All are global memory
 * barriers: a VkBufferMemoryBarrier buys nothing for buffers on current drivers (RADV, AMDVLK
 * and lavapipe treat it as global), and one place to look beats per-buffer bookkeeping.
 *
 * Each one also orders the reverse hazard (later writes after earlier reads, WAR) through its
 * execution dependency. Record one between two steps when the second reads or overwrites what
 * the first wrote; steps that touch disjoint data need none (e.g. the per-part dispatches of
 * one op). Host writes to mapped memory before vkQueueSubmit need no barrier (the submit
 * orders them). */
#pragma once
#include <volk.h>

/* shader writes -> later shader reads/writes (one kernel feeds the next) */
void cvk_barrier_compute_to_compute(VkCommandBuffer cb);
/* copy/fill writes -> shader reads/writes (an upload or clear feeds a kernel) */
void cvk_barrier_transfer_to_compute(VkCommandBuffer cb);
/* shader writes -> copy reads/writes (a kernel's output is copied or downloaded) */
void cvk_barrier_compute_to_transfer(VkCommandBuffer cb);
/* copy/fill writes -> later copy reads/writes */
void cvk_barrier_transfer_to_transfer(VkCommandBuffer cb);
/* shader writes -> vkCmdDispatchIndirect reading its arguments */
void cvk_barrier_compute_to_indirect(VkCommandBuffer cb);
/* shader and copy writes -> host reads of mapped memory once the submission's fence signals;
 * record it last in a compute-queue command buffer whose results the host reads */
void cvk_barrier_device_to_host(VkCommandBuffer cb);
/* the same for a transfer-queue command buffer (no compute stage there) */
void cvk_barrier_transfer_to_host(VkCommandBuffer cb);
