// Boost.Asio/Beast for kinfer's HTTP code, with the names the tree uses for them (net, beast,
// http, tcp). Targets that include it link kinfer_http_server, which defines
// BOOST_BEAST_USE_STD_STRING_VIEW so that Beast's string views are std::string_view.
#pragma once

#include <utility>  // before Boost.Asio 1.74, whose awaitable.hpp needs std::exchange

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace kinfer {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

}  // namespace kinfer
