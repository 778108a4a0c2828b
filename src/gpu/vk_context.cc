#include "gpu/vk_context.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "base/cpu_relax.h"
#include "base/log.h"
#include "gpu/env_choice.h"
#include "gpu/spirv.h"
#include "gpu/vk_device_internal.h"
#include "gpu/vk_validation.h"

namespace uf::gpu {
namespace {

// Bytes per staging copy: large uploads go through in pieces of this size.
constexpr uint64_t kStagingBytes = 16 << 20;

}  // namespace

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    Reset();
    ctx_ = o.ctx_;
    buffer_ = o.buffer_;
    memory_ = o.memory_;
    size_ = o.size_;
    mapped_ = o.mapped_;
    o.ctx_ = nullptr;
    o.buffer_ = VK_NULL_HANDLE;
    o.memory_ = VK_NULL_HANDLE;
    o.size_ = 0;
    o.mapped_ = nullptr;
  }
  return *this;
}

void Buffer::Reset() {
  if (ctx_ == nullptr) return;
  const VkFns& vk = ctx_->vk_;
  if (buffer_ != VK_NULL_HANDLE) vk.vkDestroyBuffer(ctx_->device_, buffer_, nullptr);
  if (memory_ != VK_NULL_HANDLE) {
    if (mapped_ != nullptr) vk.vkUnmapMemory(ctx_->device_, memory_);
    vk.vkFreeMemory(ctx_->device_, memory_, nullptr);
    ctx_->allocated_ -= size_;
  }
  ctx_ = nullptr;
  buffer_ = VK_NULL_HANDLE;
  memory_ = VK_NULL_HANDLE;
  mapped_ = nullptr;
  size_ = 0;
}

StatusOr<std::unique_ptr<Context>> Context::Create(int index) {
  std::unique_ptr<Context> ctx(new Context());
  UF_RETURN_IF_ERROR(ctx->Init(index));
  return ctx;
}

Status Context::Init(int index) {
  UF_ASSIGN_OR_RETURN(vk_, LoadVulkan());
  std::vector<VkPhysicalDevice> devices;
  UF_RETURN_IF_ERROR(OpenInstance(&vk_, &instance_, &messenger_, &devices));
  if (index >= static_cast<int>(devices.size())) {
    return NotFoundError("no Vulkan device " + std::to_string(index) + ": there are " +
                         std::to_string(devices.size()) + " (see `ultrafast devices`)");
  }
  if (index < 0) {
    index = 0;
    for (size_t i = 0; i < devices.size(); ++i) {
      VkPhysicalDeviceProperties p;
      vk_.vkGetPhysicalDeviceProperties(devices[i], &p);
      if (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU) {
        index = static_cast<int>(i);
        break;
      }
    }
  }
  physical_ = devices[index];
  info_ = Describe(vk_, physical_, index);
  VkPhysicalDeviceProperties p;
  vk_.vkGetPhysicalDeviceProperties(physical_, &p);
  if (p.apiVersion < VK_API_VERSION_1_1) {
    return UnavailableError("Vulkan device " + info_.name + " supports only Vulkan " +
                            info_.api_version + "; 1.1 or newer is needed");
  }
  vk_.vkGetPhysicalDeviceMemoryProperties(physical_, &mem_props_);
  spin_us_ = info_.type == "cpu" ? 0 : 2000;
  if (const char* env = std::getenv("UF_GPU_SPIN_US"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long long us = std::strtoll(env, &end, 10);
    if (*end == '\0' && us >= 0 && us <= 1000000) {
      spin_us_ = us;
    } else {
      UF_LOG(WARNING) << "UF_GPU_SPIN_US=" << env << " is not 0-1000000: " << spin_us_;
    }
  }
  info_.binding_limit_enforced = info_.type != "cpu";
  if (const char* env = std::getenv("UF_GPU_BINDING_LIMIT"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const unsigned long long bytes = std::strtoull(env, &end, 10);
    if (*end == '\0' && bytes >= 16) {
      info_.max_binding_bytes = std::min<uint64_t>(info_.max_binding_bytes, bytes);
      info_.binding_limit_enforced = true;
    } else {
      UF_LOG(WARNING) << "UF_GPU_BINDING_LIMIT=" << env << " is not a byte count of 16 or more";
    }
  }
  // Unset: on wherever validation is (the checks CI runs the device tests with).
  // "fill": always through vkCmdFillBuffer, the path of device memory the host cannot map (a
  // GPU's), which lavapipe would otherwise never take.
  enum class Poison { kAuto, kOn, kFill, kOff };
  static constexpr Choices<Poison, 6> kPoison = {{"auto", Poison::kAuto}, {"on", Poison::kOn},
                                                 {"1", Poison::kOn},      {"fill", Poison::kFill},
                                                 {"off", Poison::kOff},   {"0", Poison::kOff}};
  const Poison poison = EnvChoice("UF_GPU_POISON", kPoison);
  poison_ = poison == Poison::kOn || poison == Poison::kFill ||
            (poison == Poison::kAuto && ValidationRequested() != ValidationMode::kOff);
  poison_by_fill_ = poison == Poison::kFill;
  // The GEMVs sum a row within a subgroup (subgroupAdd) and put 64 / subgroup size rows in a
  // workgroup of 64; the K-quant GEMMs take a block per 4 lanes (shuffles).
  VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &sub;
  vk_.vkGetPhysicalDeviceProperties2(physical_, &p2);
  constexpr VkSubgroupFeatureFlags kOps =
      VK_SUBGROUP_FEATURE_ARITHMETIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
  if (!(sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) ||
      (sub.supportedOperations & kOps) != kOps || sub.subgroupSize < 4 || sub.subgroupSize > 64 ||
      64 % sub.subgroupSize != 0) {
    return UnavailableError("Vulkan device " + info_.name +
                            " lacks subgroup arithmetic and shuffle operations in "
                            "compute shaders with a subgroup size of 4 to 64 dividing 64, which "
                            "the GPU kernels need");
  }

  // The kernels bind up to kMaxBindings storage buffers (Vulkan guarantees 4 a stage; GPUs
  // allow thousands): a device below that could not create their pipelines.
  if (p.limits.maxPerStageDescriptorStorageBuffers < kMaxBindings ||
      p.limits.maxDescriptorSetStorageBuffers < kMaxBindings) {
    return UnavailableError("Vulkan device " + info_.name + " binds at most " +
                            std::to_string(p.limits.maxPerStageDescriptorStorageBuffers) +
                            " storage buffers a shader stage; the GPU kernels need " +
                            std::to_string(kMaxBindings));
  }

  uint32_t n_families = 0;
  vk_.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n_families, nullptr);
  std::vector<VkQueueFamilyProperties> families(n_families);
  vk_.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n_families, families.data());
  bool found = false;
  for (uint32_t i = 0; i < n_families && !found; ++i) {
    if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      queue_family_ = i;
      found = true;
      if (families[i].timestampValidBits > 0) {
        timestamp_period_ns_ = p.limits.timestampPeriod;
      }
    }
  }
  if (!found) return UnavailableError("Vulkan device " + info_.name + " has no compute queue");
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = queue_family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  // The packed int8 dot of the integer GEMMs' *_dot4 kernels, and the matrix units of the tiled
  // GEMM's coopmat kernel with what its SPIR-V declares, where the device has them.
  VkPhysicalDeviceShaderIntegerDotProductFeatures dot{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
  VkPhysicalDeviceCooperativeMatrixFeaturesNV coopmat{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  VkPhysicalDeviceShaderFloat16Int8Features f16{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
  VkPhysicalDeviceVulkanMemoryModelFeatures memory_model{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
  std::vector<const char*> extensions;
  if (info_.integer_dot) {
    dot.shaderIntegerDotProduct = VK_TRUE;
    dot.pNext = const_cast<void*>(dci.pNext);
    dci.pNext = &dot;
    extensions.push_back(kIntegerDotExtension);
  }
  if (info_.coopmat) {
    coopmat.cooperativeMatrix = VK_TRUE;
    f16.shaderFloat16 = VK_TRUE;
    memory_model.vulkanMemoryModel = VK_TRUE;
    coopmat.pNext = &f16;
    f16.pNext = &memory_model;
    memory_model.pNext = const_cast<void*>(dci.pNext);
    dci.pNext = &coopmat;
    extensions.push_back(kFloat16Extension);
    extensions.push_back(kMemoryModelExtension);
    extensions.push_back(kCoopMatExtension);
  }
  dci.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  dci.ppEnabledExtensionNames = extensions.data();
  VkResult created = vk_.vkCreateDevice(physical_, &dci, nullptr, &device_);
  if (created != VK_SUCCESS && info_.coopmat) {
    // No GPU has yet created a device with these features here: a driver that refuses them
    // costs the matrix units, not the backend.
    UF_LOG(WARNING) << "vulkan: vkCreateDevice with the cooperative-matrix features failed ("
                    << created << "); retrying without them";
    info_.coopmat = false;
    extensions.resize(extensions.size() - 3);
    dci.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
    dci.ppEnabledExtensionNames = extensions.data();
    dci.pNext = memory_model.pNext;  // the chain below the coopmat structs (the dot's, or none)
    created = vk_.vkCreateDevice(physical_, &dci, nullptr, &device_);
  }
  UF_VK_TRY("vkCreateDevice", created);
  vk_.vkGetDeviceQueue(device_, queue_family_, 0, &queue_);

  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = queue_family_;
  UF_VK_TRY("vkCreateCommandPool", vk_.vkCreateCommandPool(device_, &pci, nullptr, &command_pool_));
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = command_pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  UF_VK_TRY("vkAllocateCommandBuffers", vk_.vkAllocateCommandBuffers(device_, &ai, &transfer_cb_));
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  UF_VK_TRY("vkCreateFence", vk_.vkCreateFence(device_, &fci, nullptr, &fence_));
  return OkStatus();
}

Context::~Context() {
  if (device_ != VK_NULL_HANDLE) {
    vk_.vkDeviceWaitIdle(device_);
    staging_ = Buffer();
    for (auto& [name, p] : pipelines_) {
      vk_.vkDestroyPipeline(device_, p->pipeline, nullptr);
      vk_.vkDestroyPipelineLayout(device_, p->layout, nullptr);
      vk_.vkDestroyDescriptorSetLayout(device_, p->set_layout, nullptr);
    }
    if (fence_ != VK_NULL_HANDLE) vk_.vkDestroyFence(device_, fence_, nullptr);
    if (command_pool_ != VK_NULL_HANDLE) vk_.vkDestroyCommandPool(device_, command_pool_, nullptr);
    vk_.vkDestroyDevice(device_, nullptr);
  }
  CloseInstance(vk_, instance_, messenger_);
}

StatusOr<uint32_t> Context::FindMemoryType(uint32_t type_bits, VkMemoryPropertyFlags want,
                                           VkMemoryPropertyFlags prefer) const {
  int best = -1;
  for (uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags f = mem_props_.memoryTypes[i].propertyFlags;
    if (!(type_bits & (1u << i)) || (f & want) != want) continue;
    if ((f & prefer) == prefer) return i;
    if (best < 0) best = static_cast<int>(i);
  }
  if (best < 0) return UnavailableError("vulkan: no memory type with the wanted properties");
  return static_cast<uint32_t>(best);
}

StatusOr<Buffer> Context::CreateBuffer(uint64_t size, Memory memory) {
  return CreateBuffer(size, memory, /*bound=*/true);
}

StatusOr<Buffer> Context::CreateBuffer(uint64_t size, Memory memory, bool bound) {
  size = std::max<uint64_t>(16, (size + 15) & ~uint64_t{15});
  // Every buffer but the staging one is bound whole to a shader, which the spec allows only up
  // to maxStorageBufferRange. A CPU driver (lavapipe: 128 MiB) binds past it in practice, so
  // there it is a warning: the synthetic 1B shapes still run there for script checks.
  if (bound && size > info_.max_binding_bytes) {
    if (info_.binding_limit_enforced) {
      // Not kResourceExhausted: no memory is short, and a shorter context would not help a
      // weight matrix.
      return UnimplementedError("vulkan: a buffer of " + std::to_string(size) +
                                " bytes is larger than the largest buffer " + info_.name +
                                " can bind to a shader (maxStorageBufferRange, " +
                                std::to_string(info_.max_binding_bytes) +
                                " bytes), and the backend binds each buffer whole");
    }
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      UF_LOG(WARNING) << "vulkan: a buffer of " << size << " bytes is past " << info_.name
                      << "'s maxStorageBufferRange (" << info_.max_binding_bytes
                      << " bytes); a CPU driver binds it anyway";
    }
  }
  Buffer b;
  b.ctx_ = this;
  b.size_ = 0;
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = size;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  UF_VK_TRY("vkCreateBuffer", vk_.vkCreateBuffer(device_, &bci, nullptr, &b.buffer_));
  VkMemoryRequirements req;
  vk_.vkGetBufferMemoryRequirements(device_, b.buffer_, &req);
  const VkMemoryPropertyFlags want =
      memory == Memory::kHost
          ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
          : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  // Host buffers are read back by the host: cached memory makes those reads fast.
  const VkMemoryPropertyFlags prefer =
      memory == Memory::kHost ? want | VK_MEMORY_PROPERTY_HOST_CACHED_BIT : want;
  UF_ASSIGN_OR_RETURN(uint32_t type, FindMemoryType(req.memoryTypeBits, want, prefer));
  VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = type;
  const VkResult r = vk_.vkAllocateMemory(device_, &mai, nullptr, &b.memory_);
  if (r != VK_SUCCESS) {
    return Status(StatusCode::kResourceExhausted,
                  "vulkan: cannot allocate " + std::to_string(req.size) + " bytes of " +
                      (memory == Memory::kHost ? "host-visible" : "device") + " memory on " +
                      info_.name + " (" + VkResultName(r) + ") with " +
                      std::to_string(allocated_ >> 20) + " MiB held already of its " +
                      std::to_string(info_.device_local_bytes >> 20) + " MiB device-local heap");
  }
  b.size_ = size;
  allocated_ += size;
  UF_VK_TRY("vkBindBufferMemory", vk_.vkBindBufferMemory(device_, b.buffer_, b.memory_, 0));
  if (memory == Memory::kHost) {
    UF_VK_TRY("vkMapMemory", vk_.vkMapMemory(device_, b.memory_, 0, VK_WHOLE_SIZE, 0, &b.mapped_));
  }
  if (poison_) {
    constexpr VkMemoryPropertyFlags kMappable =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    const bool visible =
        !poison_by_fill_ && (mem_props_.memoryTypes[type].propertyFlags & kMappable) == kMappable;
    UF_RETURN_IF_ERROR(Poison(b, visible));
  }
  return b;
}

// 0x7FC07FC0 is a NaN as one f32, as two f16 and as two bf16, and as an index it is far past
// any buffer. Memory the host can map (all of it on lavapipe) is written through a map: a
// submit and fence wait per buffer made a test of many small buffers 25x slower there.
Status Context::Poison(const Buffer& b, bool host_visible) {
  constexpr uint32_t kPattern = 0x7FC07FC0u;
  if (host_visible) {
    void* p = b.mapped();
    if (p == nullptr) {
      UF_VK_TRY("vkMapMemory", vk_.vkMapMemory(device_, b.memory_, 0, VK_WHOLE_SIZE, 0, &p));
    }
    std::fill_n(static_cast<uint32_t*>(p), b.size() / 4, kPattern);
    if (b.mapped() == nullptr) vk_.vkUnmapMemory(device_, b.memory_);
    return OkStatus();
  }
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  UF_VK_TRY("vkBeginCommandBuffer", vk_.vkBeginCommandBuffer(transfer_cb_, &bi));
  vk_.vkCmdFillBuffer(transfer_cb_, b.handle(), 0, VK_WHOLE_SIZE, kPattern);
  UF_VK_TRY("vkEndCommandBuffer", vk_.vkEndCommandBuffer(transfer_cb_));
  return SubmitAndWait(transfer_cb_);
}

Status Context::CopyBuffer(VkBuffer src, uint64_t src_off, VkBuffer dst, uint64_t dst_off,
                           uint64_t n) {
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  UF_VK_TRY("vkBeginCommandBuffer", vk_.vkBeginCommandBuffer(transfer_cb_, &bi));
  VkBufferCopy region{src_off, dst_off, n};
  vk_.vkCmdCopyBuffer(transfer_cb_, src, dst, 1, &region);
  UF_VK_TRY("vkEndCommandBuffer", vk_.vkEndCommandBuffer(transfer_cb_));
  return SubmitAndWait(transfer_cb_);
}

Status Context::Upload(const Buffer& dst, uint64_t offset, const void* src, uint64_t bytes) {
  UF_CHECK(offset + bytes <= dst.size()) << "Upload past the end of a buffer";
  if (dst.mapped() != nullptr) {
    std::memcpy(static_cast<uint8_t*>(dst.mapped()) + offset, src, bytes);
    return OkStatus();
  }
  if (!staging_.valid()) {
    UF_ASSIGN_OR_RETURN(staging_, CreateBuffer(kStagingBytes, Memory::kHost, /*bound=*/false));
  }
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(kStagingBytes, bytes - done);
    std::memcpy(staging_.mapped(), static_cast<const uint8_t*>(src) + done, n);
    UF_RETURN_IF_ERROR(CopyBuffer(staging_.handle(), 0, dst.handle(), offset + done, n));
    done += n;
  }
  return OkStatus();
}

Status Context::Download(const Buffer& src, uint64_t offset, void* dst, uint64_t bytes) {
  UF_CHECK(offset + bytes <= src.size()) << "Download past the end of a buffer";
  if (src.mapped() != nullptr) {
    std::memcpy(dst, static_cast<const uint8_t*>(src.mapped()) + offset, bytes);
    return OkStatus();
  }
  if (!staging_.valid()) {
    UF_ASSIGN_OR_RETURN(staging_, CreateBuffer(kStagingBytes, Memory::kHost, /*bound=*/false));
  }
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(kStagingBytes, bytes - done);
    UF_RETURN_IF_ERROR(CopyBuffer(src.handle(), offset + done, staging_.handle(), 0, n));
    std::memcpy(static_cast<uint8_t*>(dst) + done, staging_.mapped(), n);
    done += n;
  }
  return OkStatus();
}

Status Context::SubmitAndWait(VkCommandBuffer cb) {
  UF_RETURN_IF_ERROR(Submit(cb, fence_));
  return Wait(fence_);
}

Status Context::Submit(VkCommandBuffer cb, VkFence fence) {
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  UF_VK_TRY("vkQueueSubmit", vk_.vkQueueSubmit(queue_, 1, &si, fence));
  return OkStatus();
}

Status Context::Wait(VkFence fence) {
  bool signaled = false;
  if (spin_us_ > 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
    for (int polls = 0;; ++polls) {
      const VkResult r = vk_.vkGetFenceStatus(device_, fence);
      if (r == VK_SUCCESS) {
        signaled = true;
        break;
      }
      if (r != VK_NOT_READY) UF_VK_TRY("vkGetFenceStatus", r);
      // The clock every 16 polls: a poll is a memory read, the clock a vDSO call.
      if (polls % 16 == 15 && std::chrono::steady_clock::now() > until) break;
      CpuRelax();
    }
  }
  if (!signaled) {
    UF_VK_TRY("vkWaitForFences", vk_.vkWaitForFences(device_, 1, &fence, VK_TRUE, UINT64_MAX));
  }
  UF_VK_TRY("vkResetFences", vk_.vkResetFences(device_, 1, &fence));
  return OkStatus();
}

StatusOr<const Pipeline*> Context::GetPipeline(const std::string& name, uint32_t n_buffers) {
  auto it = pipelines_.find(name);
  if (it != pipelines_.end()) {
    UF_CHECK(it->second->n_buffers == n_buffers) << name << ": buffer count differs";
    return it->second.get();
  }
  const SpirvModule* mod = nullptr;
  for (const SpirvModule& m : SpirvModules()) {
    if (m.name == name) mod = &m;
  }
  if (mod == nullptr) return NotFoundError("vulkan: no embedded shader '" + name + "'");
  auto p = std::make_unique<Pipeline>();
  p->name = name;
  p->n_buffers = n_buffers;
  std::vector<VkDescriptorSetLayoutBinding> bindings(n_buffers);
  for (uint32_t i = 0; i < n_buffers; ++i) {
    bindings[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  }
  VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  dl.bindingCount = n_buffers;
  dl.pBindings = bindings.data();
  UF_VK_TRY("vkCreateDescriptorSetLayout",
            vk_.vkCreateDescriptorSetLayout(device_, &dl, nullptr, &p->set_layout));
  VkPushConstantRange pcr{VK_SHADER_STAGE_COMPUTE_BIT, 0, Pipeline::kMaxPushBytes};
  VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pl.setLayoutCount = 1;
  pl.pSetLayouts = &p->set_layout;
  pl.pushConstantRangeCount = 1;
  pl.pPushConstantRanges = &pcr;
  UF_VK_TRY("vkCreatePipelineLayout",
            vk_.vkCreatePipelineLayout(device_, &pl, nullptr, &p->layout));
  VkShaderModuleCreateInfo smi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  smi.codeSize = mod->words.size() * 4;
  smi.pCode = mod->words.data();
  VkShaderModule sm = VK_NULL_HANDLE;
  UF_VK_TRY("vkCreateShaderModule", vk_.vkCreateShaderModule(device_, &smi, nullptr, &sm));
  VkComputePipelineCreateInfo cpi{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cpi.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cpi.stage.module = sm;
  cpi.stage.pName = "main";
  cpi.layout = p->layout;
  const VkResult r =
      vk_.vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &cpi, nullptr, &p->pipeline);
  vk_.vkDestroyShaderModule(device_, sm, nullptr);
  UF_VK_TRY("vkCreateComputePipelines", r);
  // Validation messages then say which kernel a hazard is in.
  if (messenger_ != VK_NULL_HANDLE) {
    NameObject(vk_, instance_, device_, VK_OBJECT_TYPE_PIPELINE,
               reinterpret_cast<uint64_t>(p->pipeline), name.c_str());
  }
  const Pipeline* out = p.get();
  pipelines_[name] = std::move(p);
  return out;
}

// --- Recorder ---

namespace {
constexpr uint32_t kSetsPerPool = 256;
}  // namespace

Recorder::Recorder(Context* ctx, bool profile) : ctx_(ctx), profile_(profile) {
  const VkFns& vk = ctx_->vk();
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = ctx_->command_pool();
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkResult r = vk.vkAllocateCommandBuffers(ctx_->device(), &ai, &cb_);
  if (r != VK_SUCCESS) {
    status_ = VkError("vkAllocateCommandBuffers", r);
    cb_ = VK_NULL_HANDLE;
    return;
  }
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  r = vk.vkBeginCommandBuffer(cb_, &bi);
  if (r != VK_SUCCESS) {
    status_ = VkError("vkBeginCommandBuffer", r);
    return;
  }
  if (ctx_->timestamp_period_ns() > 0.0) {
    VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    // 0: the start, 1: the end, then (profile) one after each dispatch.
    qi.queryCount = profile_ ? 2 + kMaxProfiled : 2;
    if (vk.vkCreateQueryPool(ctx_->device(), &qi, nullptr, &timestamps_) == VK_SUCCESS) {
      vk.vkCmdResetQueryPool(cb_, timestamps_, 0, qi.queryCount);
      vk.vkCmdWriteTimestamp(cb_, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, timestamps_, 0);
    } else {
      timestamps_ = VK_NULL_HANDLE;  // timing is optional
    }
  }
}

Recorder::~Recorder() {
  const VkFns& vk = ctx_->vk();
  vk.vkDeviceWaitIdle(ctx_->device());
  if (cb_ != VK_NULL_HANDLE) vk.vkFreeCommandBuffers(ctx_->device(), ctx_->command_pool(), 1, &cb_);
  for (VkDescriptorPool p : pools_) vk.vkDestroyDescriptorPool(ctx_->device(), p, nullptr);
  if (timestamps_ != VK_NULL_HANDLE) vk.vkDestroyQueryPool(ctx_->device(), timestamps_, nullptr);
  if (fence_ != VK_NULL_HANDLE) vk.vkDestroyFence(ctx_->device(), fence_, nullptr);
}

VkDescriptorSet Recorder::AllocateSet(const Pipeline& p) {
  const VkFns& vk = ctx_->vk();
  if (sets_left_ == 0) {
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * kMaxBindings};
    VkDescriptorPoolCreateInfo ci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    ci.maxSets = kSetsPerPool;
    ci.poolSizeCount = 1;
    ci.pPoolSizes = &size;
    VkDescriptorPool pool = VK_NULL_HANDLE;
    const VkResult r = vk.vkCreateDescriptorPool(ctx_->device(), &ci, nullptr, &pool);
    if (r != VK_SUCCESS) {
      status_ = VkError("vkCreateDescriptorPool", r);
      return VK_NULL_HANDLE;
    }
    pools_.push_back(pool);
    sets_left_ = kSetsPerPool;
  }
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = pools_.back();
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &p.set_layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  const VkResult r = vk.vkAllocateDescriptorSets(ctx_->device(), &ai, &set);
  if (r != VK_SUCCESS) {
    status_ = VkError("vkAllocateDescriptorSets", r);
    return VK_NULL_HANDLE;
  }
  --sets_left_;
  return set;
}

void Recorder::Dispatch(const Pipeline& p, const std::vector<BufferRange>& buffers,
                        const void* push, uint32_t push_bytes, uint32_t groups_x, uint32_t groups_y,
                        uint32_t groups_z) {
  UF_CHECK(!finished_) << "Recorder: Dispatch after Finish";
  UF_CHECK(buffers.size() == p.n_buffers && p.n_buffers <= kMaxBindings)
      << p.name << ": " << buffers.size() << " buffers for " << p.n_buffers << " bindings";
  UF_CHECK(push_bytes <= Pipeline::kMaxPushBytes);
  if (!status_.ok()) return;
  if (groups_x == 0 || groups_y == 0 || groups_z == 0) return;
  const VkFns& vk = ctx_->vk();
  VkDescriptorSet set = AllocateSet(p);
  if (set == VK_NULL_HANDLE) return;
  if (pending_barrier_) {
    // This dispatch may read what the ones before it wrote.
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vk.vkCmdPipelineBarrier(cb_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                            VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0,
                            nullptr);
    pending_barrier_ = false;
    ++barriers_;
  }
  VkDescriptorBufferInfo infos[kMaxBindings];
  VkWriteDescriptorSet writes[kMaxBindings];
  for (uint32_t i = 0; i < p.n_buffers; ++i) {
    UF_CHECK(buffers[i].buffer != nullptr && buffers[i].buffer->valid())
        << p.name << ": binding " << i << " is empty";
    infos[i] = {buffers[i].buffer->handle(), buffers[i].offset, buffers[i].size};
    writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[i].dstSet = set;
    writes[i].dstBinding = i;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vk.vkUpdateDescriptorSets(ctx_->device(), p.n_buffers, writes, 0, nullptr);
  vk.vkCmdBindPipeline(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  vk.vkCmdBindDescriptorSets(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
  if (push_bytes > 0) {
    vk.vkCmdPushConstants(cb_, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  }
  vk.vkCmdDispatch(cb_, groups_x, groups_y, groups_z);
  if (profile_ && timestamps_ != VK_NULL_HANDLE && profiled_.size() < kMaxProfiled) {
    vk.vkCmdWriteTimestamp(cb_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamps_,
                           2 + static_cast<uint32_t>(profiled_.size()));
    profiled_.push_back(p.name);
  }
  // Inside a group the barrier waits for EndGroup.
  if (!in_group_) pending_barrier_ = true;
  ++dispatches_;
}

void Recorder::BeginGroup() {
  UF_CHECK(!in_group_ && !finished_) << "Recorder: nested group or group after Finish";
  in_group_ = true;
}

void Recorder::EndGroup() {
  UF_CHECK(in_group_) << "Recorder: EndGroup without BeginGroup";
  in_group_ = false;
  pending_barrier_ = true;
}

Status Recorder::Finish() {
  UF_CHECK(!finished_ && !in_group_);
  finished_ = true;
  if (!status_.ok()) return status_;
  // What the dispatches wrote into host-visible buffers (the logits) must be visible to the
  // host after the fence, and everything they wrote to the dispatches of later submissions (the
  // last dispatch had no barrier after it: nothing in this buffer follows it).
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask =
      VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  ctx_->vk().vkCmdPipelineBarrier(cb_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                  VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                  0, 1, &mb, 0, nullptr, 0, nullptr);
  if (timestamps_ != VK_NULL_HANDLE) {
    ctx_->vk().vkCmdWriteTimestamp(cb_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamps_, 1);
  }
  UF_VK_TRY("vkEndCommandBuffer", ctx_->vk().vkEndCommandBuffer(cb_));
  return OkStatus();
}

Status Recorder::Run() {
  UF_RETURN_IF_ERROR(Submit());
  return Wait();
}

Status Recorder::Submit() {
  UF_CHECK(finished_) << "Recorder: Submit before Finish";
  UF_CHECK(!pending_) << "Recorder: submitted again before its Wait";
  UF_RETURN_IF_ERROR(status_);
  if (fence_ == VK_NULL_HANDLE) {
    VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    UF_VK_TRY("vkCreateFence", ctx_->vk().vkCreateFence(ctx_->device(), &fci, nullptr, &fence_));
  }
  // The host wrote the step's inputs into coherent memory before this; the submit makes those
  // writes visible to the device (vkQueueSubmit is a host-write memory dependency).
  UF_RETURN_IF_ERROR(ctx_->Submit(cb_, fence_));
  pending_ = true;
  return OkStatus();
}

Status Recorder::Wait() {
  if (!pending_) return OkStatus();
  pending_ = false;
  UF_RETURN_IF_ERROR(ctx_->Wait(fence_));
  last_gpu_seconds_ = 0.0;
  if (timestamps_ != VK_NULL_HANDLE) {
    uint64_t ts[2] = {0, 0};
    const VkResult r = ctx_->vk().vkGetQueryPoolResults(
        ctx_->device(), timestamps_, 0, 2, sizeof(ts), ts, sizeof(uint64_t),
        VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r == VK_SUCCESS && ts[1] >= ts[0]) {
      last_gpu_seconds_ = static_cast<double>(ts[1] - ts[0]) * ctx_->timestamp_period_ns() * 1e-9;
    }
    if (!profiled_.empty()) {
      std::vector<uint64_t> t(profiled_.size());
      dispatch_seconds_.assign(profiled_.size(), 0.0);
      if (ctx_->vk().vkGetQueryPoolResults(
              ctx_->device(), timestamps_, 2, static_cast<uint32_t>(t.size()),
              t.size() * sizeof(uint64_t), t.data(), sizeof(uint64_t),
              VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS) {
        uint64_t prev = ts[0];
        for (size_t i = 0; i < t.size(); ++i) {
          dispatch_seconds_[i] =
              t[i] >= prev ? static_cast<double>(t[i] - prev) * ctx_->timestamp_period_ns() * 1e-9
                           : 0.0;
          prev = std::max(prev, t[i]);
        }
      }
    }
  }
  return OkStatus();
}

std::vector<KernelTime> Recorder::Profile() const {
  std::vector<KernelTime> out;
  for (size_t i = 0; i < dispatch_seconds_.size(); ++i) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const KernelTime& k) { return k.name == profiled_[i]; });
    if (it == out.end()) it = out.insert(out.end(), KernelTime{profiled_[i], 0, 0.0});
    ++it->dispatches;
    it->seconds += dispatch_seconds_[i];
  }
  return out;
}

}  // namespace uf::gpu
