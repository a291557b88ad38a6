/* tfrt_vulkan.h - the Vulkan backend of the runtime shim: kernels are SPIR-V
 * compute pipelines, dispatched on one queue of the context's own device.
 * Implements tfrt_backend.h.
 *
 * The executables' containers (IREE's VKE1 flatbuffers, kept as read-only
 * data of the model) are parsed at build time: the generated code gives this
 * backend plain tables (tfrt_vk_pipeline_desc) that point into them, so the
 * shim reads no flatbuffers.
 *
 * This header does not include <vulkan/vulkan.h>: tfaot computes the context
 * size from the C text of the structs, so Vulkan handles are stored here as
 * plain pointers (dispatchable) and uint64_t (non-dispatchable), and the
 * driver's functions as void pointers loaded at init (tfrt_vulkan.c). */
#ifndef TFRT_VULKAN_H_
#define TFRT_VULKAN_H_

#include "tfrt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TFRT_BACKEND_NAME "vulkan"

/* At most this many storage buffers per dispatch (Vulkan guarantees 4 per
 * stage; the limit is checked against the device at init). */
#define TFRT_VK_MAX_BINDINGS 32u
/* Number of driver functions the backend loads (TFRT_VK_FUNCTIONS in the .c). */
#define TFRT_VK_FUNCTION_COUNT 46u

/* One compute pipeline of an executable, from its VKE1 container. */
typedef struct tfrt_vk_pipeline_desc {
  uint32_t spirv_offset;          /* byte offset of the SPIR-V words in the container */
  uint32_t spirv_words;
  uint32_t entry_offset;          /* byte offset of the NUL-terminated entry point name */
  uint32_t binding_count;         /* storage buffers 0..n-1 of set 0 */
  uint32_t push_constant_bytes;   /* one push-constant range at offset 0 */
  uint32_t subgroup_size;         /* the size the SPIR-V assumes; 0 = any */
} tfrt_vk_pipeline_desc;

/* One executable container: the read-only data executable.load receives,
 * and its pipelines (a range of the model's pipeline table). */
typedef struct tfrt_vk_executable_desc {
  const uint8_t *container;
  uint32_t first_pipeline;
  uint32_t pipeline_count;
} tfrt_vk_executable_desc;

/* The Vulkan objects of one pipeline (handles as uint64_t). */
typedef struct tfrt_vk_pipeline {
  uint64_t set_layout;
  uint64_t layout;
  uint64_t pipeline;
} tfrt_vk_pipeline;

struct tfrt_executable {
  tfrt_obj hdr;
  tfrt_runtime *rt;
  const tfrt_vk_executable_desc *desc;
  uint32_t *function_ids;         /* name slot -> pipeline index, resolved at load */
};

/* The Vulkan backend's part of a context.  The generated init fills the
 * first group (static tables and storage inside the context); init fills
 * the rest. */
typedef struct tfrt_backend {
  const tfrt_vk_executable_desc *executable_descs;
  uint32_t executable_desc_count;
  const tfrt_vk_pipeline_desc *pipeline_descs;
  uint32_t pipeline_count;
  tfrt_vk_pipeline *pipelines;        /* pipeline_count, in the context */
  tfrt_staging staging;               /* bytes: set by the generated init */

  void *loader;                       /* dlopen handle of libvulkan.so.1 */
  void *fn[TFRT_VK_FUNCTION_COUNT];
  void *instance;
  void *physical_device;
  void *device;
  void *queue;
  void *command_buffer;
  uint64_t command_pool;
  uint64_t fence;
  uint64_t memory;
  uint64_t buffer;                    /* arena + staging, bound by every dispatch */
  uint8_t *mapped;                    /* host address of the buffer's memory */
  uint64_t offset_alignment;          /* minStorageBufferOffsetAlignment */
  uint64_t max_range;                 /* maxStorageBufferRange */
  uint32_t max_push_bytes;
  uint32_t subgroup_size;
  uint32_t pipelines_created;
  uint32_t recording;                 /* a batch of dispatches is being recorded */
} tfrt_backend;

#ifdef __cplusplus
}
#endif

#include "tfrt_backend.h"

#endif /* TFRT_VULKAN_H_ */
