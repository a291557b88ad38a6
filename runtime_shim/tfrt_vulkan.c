/* tfrt_vulkan.c - the Vulkan backend of the runtime shim (see tfrt_vulkan.h
 * and tfrt_backend.h).  Included by the generated model source after
 * tfrt_core.c.
 *
 * Each context owns a Vulkan instance, device and queue, so contexts in
 * different threads share nothing.  The loader (libvulkan.so.1) is opened
 * with dlopen at init: the library has no link dependency on Vulkan, and a
 * machine without a driver gets TFRT_STATUS_DEVICE, not a crash.
 *
 * Memory: the whole arena (weights, state, temporaries) is one buffer in
 * host-visible, host-coherent memory (device-local too where the device has
 * such memory), mapped for the context's lifetime; the core's arena
 * allocator hands out blocks of it, and a dispatch binds the buffer at the
 * block's offset.  The step's input lives in caller (context) memory: such a
 * read-only buffer is copied into a staging area after the arena
 * (tfrt_device_offset in tfrt_core.c).
 *
 * Ordering: dispatches are recorded into one command buffer with a
 * compute->compute barrier after each (the host program emits none), and
 * submitted when the host next touches buffer contents or a function
 * returns (tfrt_backend_sync). */
#ifndef TFRT_UNITY_BUILD
/* Compiled on its own (an IDE, or a CMake file(GLOB) of every .c in src/):
 * the model's source NAME.c includes this file, so there is nothing to
 * compile here.  (A declaration keeps the unit from being empty.) */
typedef int tfrt_tfrt_vulkan_c_is_included_by_the_model_source;
#else
#include <dlfcn.h>

#define VK_NO_PROTOTYPES 1
#include <vulkan/vulkan.h>

#include "tfrt_vulkan.h"

/* The driver functions the backend uses, loaded at init. */
#define TFRT_VK_FUNCTIONS(X)                                                              \
  X(vkGetInstanceProcAddr) X(vkCreateInstance) X(vkDestroyInstance)                       \
  X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)                          \
  X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceQueueFamilyProperties)           \
  X(vkGetPhysicalDeviceMemoryProperties) X(vkEnumerateDeviceExtensionProperties)          \
  X(vkCreateDevice) X(vkGetDeviceProcAddr) X(vkDestroyDevice) X(vkGetDeviceQueue)         \
  X(vkDeviceWaitIdle) X(vkCreateBuffer) X(vkDestroyBuffer)                                \
  X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory)                    \
  X(vkBindBufferMemory) X(vkMapMemory) X(vkUnmapMemory) X(vkCreateCommandPool)            \
  X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkBeginCommandBuffer)             \
  X(vkEndCommandBuffer) X(vkResetCommandBuffer) X(vkCreateFence) X(vkDestroyFence)        \
  X(vkWaitForFences) X(vkResetFences) X(vkQueueSubmit) X(vkCreateShaderModule)            \
  X(vkDestroyShaderModule) X(vkCreateDescriptorSetLayout)                                 \
  X(vkDestroyDescriptorSetLayout) X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout)    \
  X(vkCreateComputePipelines) X(vkDestroyPipeline) X(vkCmdBindPipeline)                   \
  X(vkCmdPushDescriptorSetKHR) X(vkCmdPushConstants) X(vkCmdDispatch)                     \
  X(vkCmdPipelineBarrier)

enum {
#define TFRT_VK_INDEX(f) TFRT_VK_##f,
  TFRT_VK_FUNCTIONS(TFRT_VK_INDEX)
#undef TFRT_VK_INDEX
  TFRT_VK_LOADED_COUNT_
};
_Static_assert(TFRT_VK_LOADED_COUNT_ == TFRT_VK_FUNCTION_COUNT,
               "TFRT_VK_FUNCTION_COUNT in tfrt_vulkan.h must count TFRT_VK_FUNCTIONS");

/* Calls a loaded driver function: VK(be, vkCreateBuffer)(...). */
#define VK(be, f) ((PFN_##f)(be)->fn[TFRT_VK_##f])

/* Non-dispatchable handles are pointers on 64-bit targets and uint64_t on
 * 32-bit ones; the context stores them as uint64_t either way. */
#if defined(VK_USE_64_BIT_PTR_DEFINES) && VK_USE_64_BIT_PTR_DEFINES == 1
#define TFRT_VK_HANDLE(T, v) ((T)(uintptr_t)(v))
#define TFRT_VK_U64(h) ((uint64_t)(uintptr_t)(h))
#else
#define TFRT_VK_HANDLE(T, v) ((T)(v))
#define TFRT_VK_U64(h) ((uint64_t)(h))
#endif

#define TFRT_VK_CHECK(call) \
  do { if ((call) != VK_SUCCESS) return TFRT_STATUS_DEVICE; } while (0)

/* ---- init ------------------------------------------------------------------ */

static int tfrt_vk_load_loader(tfrt_backend *be) {
  be->loader = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!be->loader) return TFRT_STATUS_DEVICE;
  be->fn[TFRT_VK_vkGetInstanceProcAddr] = dlsym(be->loader, "vkGetInstanceProcAddr");
  if (!be->fn[TFRT_VK_vkGetInstanceProcAddr]) return TFRT_STATUS_DEVICE;
  be->fn[TFRT_VK_vkCreateInstance] =
      (void *)VK(be, vkGetInstanceProcAddr)(NULL, "vkCreateInstance");
  return be->fn[TFRT_VK_vkCreateInstance] ? TFRT_OK : TFRT_STATUS_DEVICE;
}

/* Loads every other function through the instance (and later the device). */
static int tfrt_vk_load_functions(tfrt_backend *be, int device_level) {
  static const char *const names[] = {
#define TFRT_VK_NAME(f) #f,
      TFRT_VK_FUNCTIONS(TFRT_VK_NAME)
#undef TFRT_VK_NAME
  };
  for (uint32_t i = TFRT_VK_vkDestroyInstance; i < TFRT_VK_FUNCTION_COUNT; ++i) {
    int is_device_fn = i >= TFRT_VK_vkDestroyDevice;
    if (is_device_fn != device_level) continue;
    be->fn[i] = device_level
        ? (void *)VK(be, vkGetDeviceProcAddr)((VkDevice)be->device, names[i])
        : (void *)VK(be, vkGetInstanceProcAddr)((VkInstance)be->instance, names[i]);
    if (!be->fn[i]) return TFRT_STATUS_DEVICE;
  }
  return TFRT_OK;
}

static int tfrt_vk_create_instance(tfrt_backend *be) {
  VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "tfaot", 1, "tfaot", 1,
                           VK_API_VERSION_1_1};
  VkInstanceCreateInfo info = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, NULL, 0, &app,
                               0, NULL, 0, NULL};
  VkInstance instance = NULL;
  TFRT_VK_CHECK(VK(be, vkCreateInstance)(&info, NULL, &instance));
  be->instance = instance;
  return tfrt_vk_load_functions(be, 0);
}

static int tfrt_vk_has_push_descriptors(tfrt_backend *be, VkPhysicalDevice pd) {
  VkExtensionProperties props[256];
  uint32_t count = 256;
  VkResult r = VK(be, vkEnumerateDeviceExtensionProperties)(pd, NULL, &count, props);
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) return 0;
  for (uint32_t i = 0; i < count; ++i)
    if (strcmp(props[i].extensionName, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME) == 0) return 1;
  return 0;
}

/* The first device with a compute queue and push descriptors; its queue family. */
static int tfrt_vk_pick_device(tfrt_backend *be, uint32_t *family) {
  VkPhysicalDevice devices[16];
  uint32_t count = 16;
  VkResult r = VK(be, vkEnumeratePhysicalDevices)((VkInstance)be->instance, &count, devices);
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) return TFRT_STATUS_DEVICE;
  for (uint32_t d = 0; d < count; ++d) {
    VkQueueFamilyProperties families[16];
    uint32_t nfam = 16;
    VK(be, vkGetPhysicalDeviceQueueFamilyProperties)(devices[d], &nfam, families);
    for (uint32_t f = 0; f < nfam; ++f) {
      if (!(families[f].queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
      if (!tfrt_vk_has_push_descriptors(be, devices[d])) break;
      be->physical_device = devices[d];
      *family = f;
      return TFRT_OK;
    }
  }
  return TFRT_STATUS_DEVICE;
}

/* Records the limits the dispatches are checked against. */
static int tfrt_vk_read_limits(tfrt_backend *be) {
  VkPhysicalDeviceSubgroupProperties subgroup = {
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, NULL, 0, 0, 0, 0};
  VkPhysicalDeviceProperties2 props = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                       &subgroup, {0}};
  VK(be, vkGetPhysicalDeviceProperties2)((VkPhysicalDevice)be->physical_device, &props);
  const VkPhysicalDeviceLimits *limits = &props.properties.limits;
  be->offset_alignment = limits->minStorageBufferOffsetAlignment;
  be->max_range = limits->maxStorageBufferRange;
  be->max_push_bytes = limits->maxPushConstantsSize;
  be->subgroup_size = subgroup.subgroupSize;
  /* Arena blocks are TFRT_ALIGNMENT-aligned: a device needing more cannot bind them. */
  if (be->offset_alignment > TFRT_ALIGNMENT) return TFRT_STATUS_DEVICE;
  if (limits->maxPerStageDescriptorStorageBuffers < TFRT_VK_MAX_BINDINGS &&
      limits->maxPerStageDescriptorStorageBuffers < 8)
    return TFRT_STATUS_DEVICE;
  for (uint32_t i = 0; i < be->pipeline_count; ++i) {
    const tfrt_vk_pipeline_desc *p = &be->pipeline_descs[i];
    if (p->push_constant_bytes > be->max_push_bytes) return TFRT_STATUS_DEVICE;
    if (p->binding_count > limits->maxPerStageDescriptorStorageBuffers)
      return TFRT_STATUS_DEVICE;
    /* SPIR-V built for another subgroup size computes wrong results silently. */
    if (p->subgroup_size && p->subgroup_size != be->subgroup_size) return TFRT_STATUS_DEVICE;
  }
  return TFRT_OK;
}

static int tfrt_vk_create_device(tfrt_backend *be, uint32_t family) {
  float priority = 1.0f;
  VkDeviceQueueCreateInfo queue = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, NULL, 0,
                                   family, 1, &priority};
  const char *extensions[] = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
  VkDeviceCreateInfo info = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, NULL, 0, 1, &queue,
                             0, NULL, 1, extensions, NULL};
  VkDevice device = NULL;
  TFRT_VK_CHECK(VK(be, vkCreateDevice)((VkPhysicalDevice)be->physical_device, &info, NULL,
                                       &device));
  be->device = device;
  int status = tfrt_vk_load_functions(be, 1);
  if (status != TFRT_OK) return status;
  VkQueue q = NULL;
  VK(be, vkGetDeviceQueue)(device, family, 0, &q);
  be->queue = q;
  VkCommandPoolCreateInfo pool_info = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, NULL,
                                       VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, family};
  VkCommandPool pool;
  TFRT_VK_CHECK(VK(be, vkCreateCommandPool)(device, &pool_info, NULL, &pool));
  be->command_pool = TFRT_VK_U64(pool);
  VkCommandBufferAllocateInfo cb_info = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL,
                                         pool, VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
  VkCommandBuffer cb = NULL;
  TFRT_VK_CHECK(VK(be, vkAllocateCommandBuffers)(device, &cb_info, &cb));
  be->command_buffer = cb;
  VkFenceCreateInfo fence_info = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO, NULL, 0};
  VkFence fence;
  TFRT_VK_CHECK(VK(be, vkCreateFence)(device, &fence_info, NULL, &fence));
  be->fence = TFRT_VK_U64(fence);
  return TFRT_OK;
}

/* A host-visible, host-coherent memory type the buffer can use; device-local
 * as well if there is one (integrated GPUs, resizable BAR). */
static int tfrt_vk_memory_type(tfrt_backend *be, uint32_t allowed, uint32_t *out) {
  VkPhysicalDeviceMemoryProperties mem;
  VK(be, vkGetPhysicalDeviceMemoryProperties)((VkPhysicalDevice)be->physical_device, &mem);
  const VkMemoryPropertyFlags host =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const VkMemoryPropertyFlags wants[2] = {host | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, host};
  for (int w = 0; w < 2; ++w)
    for (uint32_t i = 0; i < mem.memoryTypeCount; ++i)
      if ((allowed & (1u << i)) && (mem.memoryTypes[i].propertyFlags & wants[w]) == wants[w]) {
        *out = i;
        return TFRT_OK;
      }
  return TFRT_STATUS_DEVICE;
}

static int tfrt_vk_create_memory(tfrt_backend *be, tfrt_arena *arena) {
  VkDevice device = (VkDevice)be->device;
  size_t bytes = tfrt_round_up(arena->arena_bytes, TFRT_ALIGNMENT) + be->staging.bytes;
  VkBufferCreateInfo info = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, NULL, 0, bytes,
                             VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, VK_SHARING_MODE_EXCLUSIVE,
                             0, NULL};
  VkBuffer buffer;
  TFRT_VK_CHECK(VK(be, vkCreateBuffer)(device, &info, NULL, &buffer));
  be->buffer = TFRT_VK_U64(buffer);
  VkMemoryRequirements req;
  VK(be, vkGetBufferMemoryRequirements)(device, buffer, &req);
  uint32_t type = 0;
  int status = tfrt_vk_memory_type(be, req.memoryTypeBits, &type);
  if (status != TFRT_OK) return status;
  VkMemoryAllocateInfo alloc = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, NULL, req.size, type};
  VkDeviceMemory memory;
  TFRT_VK_CHECK(VK(be, vkAllocateMemory)(device, &alloc, NULL, &memory));
  be->memory = TFRT_VK_U64(memory);
  TFRT_VK_CHECK(VK(be, vkBindBufferMemory)(device, buffer, memory, 0));
  void *mapped = NULL;
  TFRT_VK_CHECK(VK(be, vkMapMemory)(device, memory, 0, VK_WHOLE_SIZE, 0, &mapped));
  be->mapped = (uint8_t *)mapped;
  arena->arena = be->mapped;
  return TFRT_OK;
}

TFRT_INTERNAL int tfrt_backend_init(tfrt_runtime *rt) {
  tfrt_backend *be = &rt->backend;
  uint32_t family = 0;
  int status = tfrt_vk_load_loader(be);
  if (status == TFRT_OK) status = tfrt_vk_create_instance(be);
  if (status == TFRT_OK) status = tfrt_vk_pick_device(be, &family);
  if (status == TFRT_OK) status = tfrt_vk_read_limits(be);
  if (status == TFRT_OK) status = tfrt_vk_create_device(be, family);
  if (status == TFRT_OK) status = tfrt_vk_create_memory(be, &rt->arena);
  if (status != TFRT_OK) tfrt_backend_deinit(rt);
  return status;
}

TFRT_INTERNAL void tfrt_backend_deinit(tfrt_runtime *rt) {
  tfrt_backend *be = &rt->backend;
  VkDevice device = (VkDevice)be->device;
  if (device) {
    VK(be, vkDeviceWaitIdle)(device);
    for (uint32_t i = 0; i < be->pipelines_created; ++i) {
      tfrt_vk_pipeline *p = &be->pipelines[i];
      VK(be, vkDestroyPipeline)(device, TFRT_VK_HANDLE(VkPipeline, p->pipeline), NULL);
      VK(be, vkDestroyPipelineLayout)(device, TFRT_VK_HANDLE(VkPipelineLayout, p->layout), NULL);
      VK(be, vkDestroyDescriptorSetLayout)(
          device, TFRT_VK_HANDLE(VkDescriptorSetLayout, p->set_layout), NULL);
    }
    if (be->mapped) VK(be, vkUnmapMemory)(device, TFRT_VK_HANDLE(VkDeviceMemory, be->memory));
    VK(be, vkDestroyBuffer)(device, TFRT_VK_HANDLE(VkBuffer, be->buffer), NULL);
    VK(be, vkFreeMemory)(device, TFRT_VK_HANDLE(VkDeviceMemory, be->memory), NULL);
    VK(be, vkDestroyFence)(device, TFRT_VK_HANDLE(VkFence, be->fence), NULL);
    VK(be, vkDestroyCommandPool)(device, TFRT_VK_HANDLE(VkCommandPool, be->command_pool), NULL);
    VK(be, vkDestroyDevice)(device, NULL);
  }
  if (be->instance) VK(be, vkDestroyInstance)((VkInstance)be->instance, NULL);
  if (be->loader) dlclose(be->loader);
  be->loader = NULL;
  be->instance = be->physical_device = be->device = be->queue = be->command_buffer = NULL;
  be->mapped = NULL;
  be->pipelines_created = 0;
  be->recording = 0;
  rt->arena.arena = NULL;
}

/* ---- submission -------------------------------------------------------------- */

static void tfrt_vk_end_batch(tfrt_backend *be) {
  be->recording = 0;
  tfrt_staging_clear(&be->staging);
}

TFRT_INTERNAL int tfrt_backend_sync(tfrt_runtime *rt) {
  tfrt_backend *be = &rt->backend;
  if (!be->recording) return TFRT_OK;
  VkCommandBuffer cb = (VkCommandBuffer)be->command_buffer;
  VkDevice device = (VkDevice)be->device;
  VkFence fence = TFRT_VK_HANDLE(VkFence, be->fence);
  /* Makes the kernels' writes visible to the host once the fence signals. */
  VkMemoryBarrier to_host = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL,
                             VK_ACCESS_SHADER_WRITE_BIT, VK_ACCESS_HOST_READ_BIT};
  VK(be, vkCmdPipelineBarrier)(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                               VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &to_host, 0, NULL, 0, NULL);
  VkResult r = VK(be, vkEndCommandBuffer)(cb);
  VkSubmitInfo submit = {VK_STRUCTURE_TYPE_SUBMIT_INFO, NULL, 0, NULL, NULL, 1, &cb, 0, NULL};
  if (r == VK_SUCCESS) r = VK(be, vkQueueSubmit)((VkQueue)be->queue, 1, &submit, fence);
  if (r == VK_SUCCESS) r = VK(be, vkWaitForFences)(device, 1, &fence, VK_TRUE, UINT64_MAX);
  if (r == VK_SUCCESS) r = VK(be, vkResetFences)(device, 1, &fence);
  VK(be, vkResetCommandBuffer)(cb, 0);
  tfrt_vk_end_batch(be);
  return r == VK_SUCCESS ? TFRT_OK : TFRT_STATUS_DEVICE;
}

TFRT_INTERNAL void tfrt_backend_discard(tfrt_runtime *rt) {
  tfrt_backend *be = &rt->backend;
  if (!be->recording) return;
  VkCommandBuffer cb = (VkCommandBuffer)be->command_buffer;
  VK(be, vkEndCommandBuffer)(cb);
  VK(be, vkResetCommandBuffer)(cb, 0);
  tfrt_vk_end_batch(be);
}

static int tfrt_vk_begin_batch(tfrt_backend *be) {
  if (be->recording) return TFRT_OK;
  VkCommandBufferBeginInfo begin = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, NULL,
                                    VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT, NULL};
  TFRT_VK_CHECK(VK(be, vkBeginCommandBuffer)((VkCommandBuffer)be->command_buffer, &begin));
  be->recording = 1;
  return TFRT_OK;
}

/* ---- hal_loader.* ------------------------------------------------------------ */

TFRT_INTERNAL int tfrt_executable_query_support(const tfrt_buffer *format, int32_t *out) {
  *out = tfrt_cstr_eq(format, "vulkan-spirv-fb") ? 1 : 0;
  return TFRT_OK;
}

static int tfrt_vk_create_pipeline(tfrt_backend *be, const uint8_t *container,
                                   const tfrt_vk_pipeline_desc *desc, tfrt_vk_pipeline *out) {
  VkDevice device = (VkDevice)be->device;
  VkShaderModuleCreateInfo module_info = {
      VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, NULL, 0, (size_t)desc->spirv_words * 4u,
      (const uint32_t *)(const void *)(container + desc->spirv_offset)};
  VkShaderModule module;
  TFRT_VK_CHECK(VK(be, vkCreateShaderModule)(device, &module_info, NULL, &module));
  VkDescriptorSetLayoutBinding bindings[TFRT_VK_MAX_BINDINGS];
  for (uint32_t i = 0; i < desc->binding_count; ++i) {
    VkDescriptorSetLayoutBinding b = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1,
                                      VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    bindings[i] = b;
  }
  VkDescriptorSetLayoutCreateInfo set_info = {
      VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, NULL,
      VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR, desc->binding_count, bindings};
  VkDescriptorSetLayout set_layout;
  VkPipelineLayout layout;
  VkPipeline pipeline;
  VkResult r = VK(be, vkCreateDescriptorSetLayout)(device, &set_info, NULL, &set_layout);
  if (r == VK_SUCCESS) {
    VkPushConstantRange range = {VK_SHADER_STAGE_COMPUTE_BIT, 0, desc->push_constant_bytes};
    VkPipelineLayoutCreateInfo layout_info = {
        VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, NULL, 0, 1, &set_layout,
        desc->push_constant_bytes ? 1u : 0u, &range};
    r = VK(be, vkCreatePipelineLayout)(device, &layout_info, NULL, &layout);
    if (r != VK_SUCCESS) VK(be, vkDestroyDescriptorSetLayout)(device, set_layout, NULL);
  }
  if (r == VK_SUCCESS) {
    VkComputePipelineCreateInfo info = {
        VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, NULL, 0,
        {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, NULL, 0,
         VK_SHADER_STAGE_COMPUTE_BIT, module, (const char *)container + desc->entry_offset, NULL},
        layout, VK_NULL_HANDLE, -1};
    r = VK(be, vkCreateComputePipelines)(device, VK_NULL_HANDLE, 1, &info, NULL, &pipeline);
    if (r != VK_SUCCESS) {
      VK(be, vkDestroyPipelineLayout)(device, layout, NULL);
      VK(be, vkDestroyDescriptorSetLayout)(device, set_layout, NULL);
    }
  }
  VK(be, vkDestroyShaderModule)(device, module, NULL);
  if (r != VK_SUCCESS) return TFRT_STATUS_DEVICE;
  out->set_layout = TFRT_VK_U64(set_layout);
  out->layout = TFRT_VK_U64(layout);
  out->pipeline = TFRT_VK_U64(pipeline);
  return TFRT_OK;
}

/* hal_loader.executable.load(format, data, constants) -> !hal.executable.
 * `data` is one of the model's executable containers; its pipelines are
 * created now and every dispatch name is resolved to a pipeline index. */
TFRT_INTERNAL int tfrt_executable_load(tfrt_runtime *rt, const tfrt_buffer *format,
                                       const tfrt_buffer *data, const tfrt_buffer *constants,
                                       tfrt_executable **out) {
  *out = NULL;
  if (!tfrt_cstr_eq(format, "vulkan-spirv-fb")) return TFRT_STATUS_UNIMPLEMENTED;
  if (constants && constants->length) return TFRT_STATUS_UNIMPLEMENTED;
  if (!data) return TFRT_STATUS_NULL_REF;
  tfrt_backend *be = &rt->backend;
  const tfrt_vk_executable_desc *desc = NULL;
  for (uint32_t i = 0; i < be->executable_desc_count; ++i)
    if (be->executable_descs[i].container == data->data) desc = &be->executable_descs[i];
  if (!desc) return TFRT_STATUS_NOT_FOUND;
  for (uint32_t p = desc->first_pipeline; p < desc->first_pipeline + desc->pipeline_count; ++p) {
    if (p != be->pipelines_created) return TFRT_STATUS_INVALID_ARGUMENT; /* loaded twice */
    int status = tfrt_vk_create_pipeline(be, desc->container, &be->pipeline_descs[p],
                                         &be->pipelines[p]);
    if (status != TFRT_OK) return status;
    be->pipelines_created++;
  }
  tfrt_executable *exe = tfrt_executable_new(rt);
  if (!exe) return TFRT_STATUS_OUT_OF_MEMORY;
  exe->rt = rt;
  exe->desc = desc;
  for (uint32_t p = desc->first_pipeline; p < desc->first_pipeline + desc->pipeline_count; ++p)
    tfrt_executable_name(rt, exe, (const char *)desc->container + be->pipeline_descs[p].entry_offset,
                         p);
  *out = exe;
  return TFRT_OK;
}

/* Fills one descriptor per binding (buffer, offset, range). */
static int tfrt_vk_describe_bindings(tfrt_runtime *rt, uint32_t binding_count,
                                     const tfrt_binding *bindings, VkDescriptorBufferInfo *infos,
                                     VkWriteDescriptorSet *writes) {
  tfrt_backend *be = &rt->backend;
  for (uint32_t i = 0; i < binding_count; ++i) {
    const tfrt_binding *b = &bindings[i];
    if (!b->buffer) return TFRT_STATUS_NULL_REF;
    if (!tfrt_range_ok(b->buffer, b->offset, b->length)) return TFRT_STATUS_OUT_OF_RANGE;
    if ((uint64_t)b->length > be->max_range) return TFRT_STATUS_OUT_OF_RANGE;
    size_t offset = 0;
    int copy = 0;
    int status = tfrt_device_offset(&rt->arena, &be->staging, b, &offset, &copy);
    if (status != TFRT_OK) return status;
    if (copy) memcpy(be->mapped + offset, b->buffer->data + b->offset, (size_t)b->length);
    if (offset % be->offset_alignment) return TFRT_STATUS_ALIGNMENT;
    VkDescriptorBufferInfo info = {TFRT_VK_HANDLE(VkBuffer, be->buffer), offset,
                                   b->length ? (VkDeviceSize)b->length : VK_WHOLE_SIZE};
    infos[i] = info;
    VkWriteDescriptorSet w = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, NULL, VK_NULL_HANDLE, i, 0,
                              1, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, NULL, &infos[i], NULL};
    writes[i] = w;
  }
  return TFRT_OK;
}

/* hal_loader.executable.dispatch: records one dispatch and a barrier. */
TFRT_INTERNAL int tfrt_executable_dispatch(const tfrt_executable *exe, int64_t function_id,
                                           int32_t count_x, int32_t count_y, int32_t count_z,
                                           uint32_t constant_count, const uint32_t *constants,
                                           uint32_t binding_count, const tfrt_binding *bindings,
                                           void **binding_ptrs, size_t *binding_lengths) {
  (void)binding_ptrs;
  (void)binding_lengths;
  if (!exe) return TFRT_STATUS_NULL_REF;
  tfrt_backend *be = &exe->rt->backend;
  if (function_id < 0 || (uint64_t)function_id >= be->pipelines_created)
    return TFRT_STATUS_INVALID_ARGUMENT;
  const tfrt_vk_pipeline_desc *desc = &be->pipeline_descs[function_id];
  const tfrt_vk_pipeline *pipe = &be->pipelines[function_id];
  if (count_x < 0 || count_y < 0 || count_z < 0) return TFRT_STATUS_INVALID_ARGUMENT;
  if (binding_count != desc->binding_count || constant_count * 4u != desc->push_constant_bytes)
    return TFRT_STATUS_INVALID_ARGUMENT;
  VkDescriptorBufferInfo infos[TFRT_VK_MAX_BINDINGS];
  VkWriteDescriptorSet writes[TFRT_VK_MAX_BINDINGS];
  int status = tfrt_vk_describe_bindings(exe->rt, binding_count, bindings, infos, writes);
  if (status == TFRT_STATUS_OUT_OF_MEMORY) {
    /* The staging area is full: submit what is recorded, then stage afresh. */
    status = tfrt_backend_sync(exe->rt);
    if (status == TFRT_OK)
      status = tfrt_vk_describe_bindings(exe->rt, binding_count, bindings, infos, writes);
  }
  if (status != TFRT_OK) return status;
  status = tfrt_vk_begin_batch(be);
  if (status != TFRT_OK) return status;
  VkCommandBuffer cb = (VkCommandBuffer)be->command_buffer;
  VkPipelineLayout layout = TFRT_VK_HANDLE(VkPipelineLayout, pipe->layout);
  VK(be, vkCmdBindPipeline)(cb, VK_PIPELINE_BIND_POINT_COMPUTE,
                            TFRT_VK_HANDLE(VkPipeline, pipe->pipeline));
  if (binding_count)
    VK(be, vkCmdPushDescriptorSetKHR)(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0,
                                      binding_count, writes);
  if (constant_count)
    VK(be, vkCmdPushConstants)(cb, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, constant_count * 4u,
                               constants);
  VK(be, vkCmdDispatch)(cb, (uint32_t)count_x, (uint32_t)count_y, (uint32_t)count_z);
  /* The host program orders dispatches but emits no barriers: each one may
   * read what the previous one wrote. */
  VkMemoryBarrier barrier = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL, VK_ACCESS_SHADER_WRITE_BIT,
                             VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
  VK(be, vkCmdPipelineBarrier)(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                               VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &barrier, 0, NULL, 0,
                               NULL);
  return TFRT_OK;
}
#endif /* TFRT_UNITY_BUILD */
