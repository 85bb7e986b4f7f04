/* Devices: what a backend opened, adopted by a context, and the public
 * accessors that need nothing beyond the device itself. */
#include "device/device.h"

void kdev_backend_adopt(kdev_backend *b, kiln_ctx *ctx) {
  for (int i = 0; i < b->num_devices; i++) {
    kiln_device *d = &b->devices[i];
    d->ctx = ctx;
    d->backend = b;
    d->index = i;
    d->info.index = i;
  }
}

kiln_status kiln_device_info_get(const kiln_device *dev, kiln_device_info *out) {
  if (!dev || !out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_device_info_get: dev or out is NULL");
  *out = dev->info;
  return KILN_OK;
}

kiln_status kiln_device_memory_in_use(const kiln_device *dev, uint64_t *bytes) {
  if (!dev || !bytes)
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_device_memory_in_use: dev or bytes is NULL");
  *bytes = atomic_load(&((kiln_device *)dev)->bytes_in_use);
  return KILN_OK;
}

kiln_ctx *kiln_device_ctx(const kiln_device *dev) {
  if (!dev) kcore_fail(KILN_ERR_ARGUMENT, "kiln_device_ctx: the device is NULL");
  return dev ? dev->ctx : NULL;
}

int kiln_device_index(const kiln_device *dev) { return dev ? dev->index : -1; }

kiln_status kiln_device_synchronize(kiln_device *dev) {
  if (!dev) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_device_synchronize: dev is NULL");
  return dev->ops->synchronize(dev);
}
