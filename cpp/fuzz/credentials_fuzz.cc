// Fuzzes what credential endpoints and key files hand back -- untrusted replies from the
// network (container / instance-metadata JSON, OAuth token replies, STS XML, Azure List
// Blobs XML) and what a user passes or points at (AWS config INI, GCS key JSON, SAS tokens,
// Azure URLs). The first byte picks the parser. Any
// Status is fine; crashes and sanitizer reports are not.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "insitubatch/io/aws/aws_credential_providers.h"
#include "insitubatch/io/aws/aws_credentials.h"
#include "insitubatch/io/azure/azure_credentials.h"
#include "insitubatch/io/azure/azure_store.h"
#include "insitubatch/io/gcs/gcs_credentials.h"
#include "insitubatch/io/http/xml_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace insitubatch;
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 9) {
    case 0:
      (void)ParseCredentialsJson(text, "fuzz");
      break;
    case 1:
      (void)ParseGcsTokenReply(text, "fuzz", std::chrono::system_clock::time_point{});
      break;
    case 2:
      (void)ParseGcsKeyFile(text, "fuzz");
      break;
    case 3:
      (void)ParseAwsTimestamp(text);
      break;
    case 4:
      (void)ParseIni(text, "fuzz");
      break;
    case 6:
      (void)ParseAzureTokenReply(text, "fuzz", std::chrono::system_clock::time_point{});
      break;
    case 7:
      (void)ParseSasToken(text);
      break;
    case 8:
      (void)ParseAzureListPage(text);
      (void)ParseAzureUrl(text);
      break;
    default:
      for (const char* tag : {"AccessKeyId", "SessionToken", "Expiration", "Code", "Message"}) {
        (void)XmlFirstText(text, tag);
      }
      break;
  }
  return 0;
}
