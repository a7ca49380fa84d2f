// Boost.Asio/Beast for kinfer's HTTP code, with the names the tree uses for them (net, beast,
// http, tcp). BOOST_BEAST_USE_STD_STRING_VIEW is defined for every target (the top
// CMakeLists.txt), so that Beast's string views are std::string_view in every file of a binary.
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
